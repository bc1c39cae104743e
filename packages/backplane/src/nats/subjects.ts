import { bucketSafe, subjectToken } from '../shared/encoding.js';

/**
 * The subject layout of one cluster. Everything starts with the (encoded) cluster name, so clusters sharing a NATS
 * account never see each other, and every transfer has its own subjects, so "no responders" means nobody runs it.
 *
 * - `<cluster>.xfer.<id>.owner` — owner query (request/reply)
 * - `<cluster>.xfer.<id>.terminate` — terminate request, answered once the work stopped
 * - `<cluster>.ev.<EventType>` — events
 */
export class Subjects {
  readonly prefix: string;

  constructor(clusterName: string) {
    this.prefix = subjectToken(clusterName);
  }

  /** What an owner subscribes to: both actions of one transfer with a single subscription. */
  transferWildcard(transferId: string): string {
    return `${this.prefix}.xfer.${subjectToken(transferId)}.*`;
  }

  owner(transferId: string): string {
    return `${this.prefix}.xfer.${subjectToken(transferId)}.owner`;
  }

  terminate(transferId: string): string {
    return `${this.prefix}.xfer.${subjectToken(transferId)}.terminate`;
  }

  event(type: string): string {
    return `${this.prefix}.ev.${subjectToken(type)}`;
  }

  eventWildcard(): string {
    return `${this.prefix}.ev.*`;
  }

  /** The last token of a subject (the action or the event type). */
  static lastToken(subject: string): string {
    return subject.slice(subject.lastIndexOf('.') + 1);
  }
}

const BUCKET_NAME = /^[A-Za-z0-9_-]{1,200}$/;

/** Default KV bucket holding the latest `AliasRedirected` per alias of a cluster. */
export function defaultKvBucket(clusterName: string): string {
  return `sluice-aliases-${bucketSafe(clusterName)}`;
}

export function isValidBucketName(name: string): boolean {
  return BUCKET_NAME.test(name);
}
