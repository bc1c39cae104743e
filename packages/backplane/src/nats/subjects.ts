import { bucketSafe, subjectToken } from '../shared/encoding.js';

/**
 * The subject layout of one cluster. Everything starts with the (encoded) cluster name, so clusters sharing a NATS
 * account never see each other, and every transfer has its own subjects, so "no responders" means nobody runs it.
 *
 * - `<cluster>.xfer.<id>.owner` — owner query (request/reply)
 * - `<cluster>.xfer.<id>.terminate` — terminate request, answered once the work stopped
 * - `<cluster>.inst.<instance>.owner` / `.terminate` — the same two questions put to one process incarnation that
 *   answers for all its transfers with one subscription (the id in the body; backplanes created with `instanceId`)
 * - `<cluster>.ev.<EventType>` — events
 * - `<cluster>.ev.AliasRedirected.<host>` — alias events, per host: caches and alias versions are per host, so an
 *   api-server subscribes to its own host's subject and never hears (or compares versions with) another host's
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

  /** What an instance subscribes to once, for both actions of every transfer it runs. */
  instanceWildcard(instanceId: string): string {
    return `${this.prefix}.inst.${subjectToken(instanceId)}.*`;
  }

  /** `action` (`owner` or `terminate`) asked of one instance. */
  instance(instanceId: string, action: 'owner' | 'terminate'): string {
    return `${this.prefix}.inst.${subjectToken(instanceId)}.${action}`;
  }

  /** The subject `event` is published on (alias events on their host's subject). */
  eventOf(event: { type: string; host?: string }): string {
    return event.type === 'AliasRedirected' && event.host !== undefined
      ? this.aliasEvents(event.host)
      : this.event(event.type);
  }

  event(type: string): string {
    return `${this.prefix}.ev.${subjectToken(type)}`;
  }

  /** Alias events of one host. */
  aliasEvents(host: string): string {
    return `${this.prefix}.ev.AliasRedirected.${subjectToken(host)}`;
  }

  /** Every event of the cluster, alias events of every host included. */
  eventWildcard(): string {
    return `${this.prefix}.ev.>`;
  }

  /** Every event type with a subject of its own (not the per-host alias events). */
  typeWildcard(): string {
    return `${this.prefix}.ev.*`;
  }

  /** The event type and (for alias events) the encoded host named by an event subject, or null. */
  parseEvent(subject: string): { type: string; host: string | null } | null {
    const head = `${this.prefix}.ev.`;
    if (!subject.startsWith(head)) return null;
    const [type, host, ...rest] = subject.slice(head.length).split('.');
    if (!type || rest.length > 0) return null;
    return { type, host: host ?? null };
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
