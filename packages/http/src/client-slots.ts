/**
 * How many long-lived requests (the api-server's change feeds, the app-server's endpoint streams) each client holds
 * open on one process, and who a client is. A process-wide bound alone let one client opening streams in a loop
 * take every slot: every other client was refused although it held none. Both apps bound each client with this.
 */
import { createHash } from 'node:crypto';
import { QueueFullError } from '@sluice/core';

/**
 * Open streams per client key ({@link tokenClient} with auth, {@link addressClient} without). Only clients with a
 * stream open are kept, so the map is at most as large as the streams are many.
 *
 * @example
 * ```ts
 * const slots = new ClientSlots(100);
 * if (slots.isFull('sub:eu-analyst')) throw refusal;
 * slots.take('sub:eu-analyst'); // when the stream opens
 * slots.give('sub:eu-analyst'); // when it closes
 * ```
 */
export class ClientSlots {
  private readonly held = new Map<string, number>();

  constructor(readonly maxPerClient: number) {
    if (!Number.isInteger(maxPerClient) || maxPerClient < 1)
      throw new RangeError(`maxPerClient must be an integer ≥ 1, got ${maxPerClient}`);
  }

  /** Streams `client` has open. */
  heldBy(client: string): number {
    return this.held.get(client) ?? 0;
  }

  /** `client` may open no other stream now. */
  isFull(client: string): boolean {
    return this.heldBy(client) >= this.maxPerClient;
  }

  /** A stream of `client` opened. */
  take(client: string): void {
    this.held.set(client, this.heldBy(client) + 1);
  }

  /** A stream of `client` closed (once per {@link ClientSlots.take}). */
  give(client: string): void {
    const left = this.heldBy(client) - 1;
    if (left > 0) this.held.set(client, left);
    else this.held.delete(client);
  }

  /** Clients with at least one stream open. */
  get clients(): number {
    return this.held.size;
  }
}

/** Which bound refused a stream: the process's (`server`) or the client's (`client`), as refusal metrics label it. */
export const StreamBound = { server: 'server', client: 'client' } as const;
export type StreamBound = (typeof StreamBound)[keyof typeof StreamBound];

/** The two bounds of one kind of stream and how its refusals are worded. */
export interface StreamAdmissionOptions {
  /** What the streams are, in messages: `'change feeds'`, `'endpoint streams'`. */
  streams: string;
  /** The process, in messages: `'api-server'`, `'app-server'`. */
  process: string;
  /** Streams the process holds at once, and the setting that says so (the 429's `limit`). */
  max: { value: number; setting: string };
  /** Streams of one client at once, and its setting. */
  perClient: { value: number; setting: string };
  /** The 429's `retry-after`: streams close at the pace of their clients. */
  retryAfterSeconds: number;
  /** Told of each refusal (a counter labelled by bound). */
  onRefusal?: (bound: StreamBound) => void;
}

/**
 * Admission of long-lived streams: at most `max` open in the process, at most `perClient` of one client, each
 * refusal a 429 `QUEUE_FULL` whose `limit`/`max` name the bound that refused. The api-server's change feeds and the
 * app-server's endpoint streams are admitted by one of these each.
 *
 * @example
 * ```ts
 * const admission = new StreamAdmission({
 *   streams: 'change feeds', process: 'api-server', retryAfterSeconds: 5,
 *   max: { value: 10_000, setting: 'api.changes.maxSubscribers' },
 *   perClient: { value: 100, setting: 'api.changes.maxPerClient' },
 * });
 * const refused = admission.refusal('sub:eu-analyst', openNow, closing);
 * if (refused) throw refused;
 * admission.take('sub:eu-analyst'); // … admission.give('sub:eu-analyst') when it closes
 * ```
 */
export class StreamAdmission {
  readonly #slots: ClientSlots;

  constructor(private readonly options: StreamAdmissionOptions) {
    this.#slots = new ClientSlots(options.perClient.value);
  }

  /**
   * Why `client` may open no stream now — `open` streams already fill `max` (or the process is `closing`), or the
   * client holds `perClient` — as the 429 to answer (reported to `onRefusal`), or null when it may.
   */
  refusal(client: string, open: number, closing: boolean): QueueFullError | null {
    const { streams, process, max, perClient, retryAfterSeconds, onRefusal } = this.options;
    if (closing || open >= max.value) {
      onRefusal?.(StreamBound.server);
      return new QueueFullError(
        retryAfterSeconds,
        `This ${process} has as many ${streams} open as it accepts; retry later`,
        { limit: max.setting, max: max.value },
      );
    }
    if (this.#slots.isFull(client)) {
      onRefusal?.(StreamBound.client);
      return new QueueFullError(
        retryAfterSeconds,
        `This client has ${perClient.value} ${streams} open on this ${process}, as many as one client may; close one or retry later`,
        { limit: perClient.setting, max: perClient.value },
      );
    }
    return null;
  }

  /** A stream of `client` opened (after {@link StreamAdmission.refusal} said null). */
  take(client: string): void {
    this.#slots.take(client);
  }

  /** A stream of `client` closed (once per {@link StreamAdmission.take}). */
  give(client: string): void {
    this.#slots.give(client);
  }

  /** Clients with at least one stream open. */
  get clients(): number {
    return this.#slots.clients;
  }
}

/**
 * The client a bearer token identifies: `sub:<sub>` of its claims, else `jti:<jti>`, else `token:<hash>` of the
 * token itself (a listed token, a JWT without either). A renewed token of one subject is the same client. The token
 * is hashed: the key lives while the client has streams open, and the token is a credential.
 *
 * @example
 * ```ts
 * tokenClient(token, app.jwt.verify(token)); // 'sub:eu-analyst'
 * tokenClient('a-long-random-listed-token', null); // 'token:…'
 * ```
 */
export function tokenClient(token: string, claims: unknown): string {
  const { sub, jti } = (claims ?? {}) as { sub?: unknown; jti?: unknown };
  if (typeof sub === 'string') return `sub:${sub}`;
  if (typeof jti === 'string') return `jti:${jti}`;
  return `token:${createHash('sha256').update(token).digest('base64url').slice(0, 22)}`;
}

/**
 * The client of a request without auth: the socket's peer address, never a forwarded header (a header the caller
 * writes itself would let it be anyone). Behind a reverse proxy every client is the proxy.
 *
 * @example
 * ```ts
 * addressClient(request.socket.remoteAddress); // 'address:127.0.0.1'
 * ```
 */
export function addressClient(remoteAddress: string | undefined): string {
  return `address:${remoteAddress ?? 'unknown'}`;
}
