/**
 * How many long-lived requests (the api-server's change feeds, the app-server's endpoint streams) each client holds
 * open on one process, and who a client is. A process-wide bound alone let one client opening streams in a loop
 * take every slot: every other client was refused although it held none. Both apps bound each client with this.
 */
import { createHash } from 'node:crypto';

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
