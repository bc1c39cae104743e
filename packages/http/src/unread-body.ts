import type { IncomingMessage, Server } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';

/**
 * Most bytes of a refused body read and thrown away so that its sender gets the answer. A client that declares more
 * is not waited for: the connection closes after the answer, as before.
 */
export const UNREAD_BODY_MAX_BYTES = 64 * 1024 * 1024;

/** Longest time the rest of a refused body is read for; then the connection closes. */
export const UNREAD_BODY_MAX_MS = 10_000;

/** Where an answer to a request whose body was not read stands with the rest of that body. */
export const UnreadBody = {
  /** The body was read whole: nothing to do. */
  read: 'read',
  /** The rest is read and thrown away; the connection stays open for the answer (and the next request). */
  discarding: 'discarding',
  /**
   * The client asked to close: the connection closes after the answer whatever is said, so the rest is read and thrown
   * away *before* the answer is sent — closing with the body still arriving would reset the answer away.
   */
  draining: 'draining',
  /** Too much is coming (or the server is closing): the connection closes after the answer, as soon as it is sent. */
  closing: 'closing',
} as const;
export type UnreadBody = (typeof UnreadBody)[keyof typeof UnreadBody];

/** What the sender of an answer does about the unread body: for `draining`, send once `drained` settles. */
export type UnreadBodyPlan =
  | { phase: typeof UnreadBody.read | typeof UnreadBody.discarding | typeof UnreadBody.closing }
  | { phase: typeof UnreadBody.draining; drained: Promise<void> };

/** The declared body length, or null when the body is chunked (or the header is unusable). */
function declaredLength(request: IncomingMessage): number | null {
  const header = request.headers['content-length'];
  if (header === undefined) return null;
  const length = Number(header);
  return Number.isSafeInteger(length) && length >= 0 ? length : null;
}

/** Why the rest of a refused body stopped being read before it had arrived. */
const GaveUp = {
  /** More than {@link UNREAD_BODY_MAX_BYTES} arrived. */
  bytes: 'bytes',
  /** It did not arrive within {@link UNREAD_BODY_MAX_MS}. */
  time: 'time',
  /** The server is closing: it waits for no body whose answer is decided. */
  closing: 'closing',
} as const;
type GaveUp = (typeof GaveUp)[keyof typeof GaveUp];

/** A body being read and thrown away: settles once it has arrived, the request is gone, or reading gave up. */
interface Discard {
  readonly settled: Promise<void>;
  /** Stops reading now (the server is closing); `onGiveUp` runs with `closing`. Nothing once settled. */
  stop(): void;
}

/**
 * Reads the rest of `raw`'s body and throws it away (never kept), bounded by {@link UNREAD_BODY_MAX_BYTES} and
 * {@link UNREAD_BODY_MAX_MS}; `onGiveUp` runs when a bound is hit (or {@link Discard.stop} is called) first.
 */
function discardRest(raw: IncomingMessage, onGiveUp: (reason: GaveUp, discarded: number) => void): Discard {
  let settle = () => {};
  let discarded = 0;
  let done = false;
  const finish = (reason: GaveUp | null) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    settle();
    if (reason !== null) onGiveUp(reason, discarded);
  };
  const settled = new Promise<void>((resolve) => {
    settle = resolve;
  });
  const timer = setTimeout(() => finish(GaveUp.time), UNREAD_BODY_MAX_MS);
  timer.unref();
  raw.on('data', (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > UNREAD_BODY_MAX_BYTES) finish(GaveUp.bytes);
  });
  raw.once('end', () => finish(null));
  raw.once('close', () => finish(null));
  raw.resume();
  return { settled, stop: () => finish(GaveUp.closing) };
}

/**
 * Destroys the connection of `request` once the answer `reply` has been handed to the OS (at once if it already has).
 * The request's socket, not the reply's: a finished response lets go of its socket.
 */
function closeAfterAnswer(request: FastifyRequest, reply: FastifyReply): void {
  const socket = request.raw.socket;
  if (reply.raw.writableFinished) socket.destroy();
  else reply.raw.once('finish', () => socket.destroy());
}

/**
 * The refused bodies a server is reading and throwing away, so that its shutdown waits for none of them: once it
 * closes ({@link UnreadBodies.close}), a connection whose answer went out is closed as soon as that answer is
 * written, and an answer waiting for its body (`draining`) goes at once. A graceful close finishes requests in
 * flight; a client still owing the body of a request already answered is not one, and would otherwise hold the
 * shutdown for up to {@link UNREAD_BODY_MAX_MS}.
 */
export class UnreadBodies {
  #closing = false;
  readonly #discards = new Set<Discard>();

  /** True once {@link UnreadBodies.close} was called. */
  get closing(): boolean {
    return this.#closing;
  }

  /**
   * Prepares the answer to a request refused before its body was read (too large, not JSON, …), so that the client
   * gets it. fastify answers such a request with `connection: close` and Node then closes the socket with the body
   * still arriving: the peer's TCP stack answers the next bytes with a reset, which may erase the answer from the
   * client's buffers before it reads it (RFC 9112 § 9.6) — fetch then fails with `EPIPE`/`ECONNRESET` instead of
   * showing the 413. So the rest of the body is read and thrown away (never kept):
   * - a keep-alive client (`discarding`): the answer goes now and keeps the connection open, and once the body has
   *   arrived the connection serves the next request;
   * - a client that asked to close, or speaks HTTP/1.0 (`draining`): Node closes after the answer whatever is said
   *   here, so the answer waits until the body has arrived (`drained`) — then nothing is left to be reset.
   *
   * Bounded: a body declared over {@link UNREAD_BODY_MAX_BYTES}, or a closing server, is not waited for
   * (`closing`), and one that exceeds it or takes longer than {@link UNREAD_BODY_MAX_MS} has its connection closed
   * (a keep-alive one at once; a draining one right after its answer, which then goes without waiting longer) and
   * logged. A server that starts closing stops waiting for every one of them (see {@link UnreadBodies.close}).
   *
   * Call it right before sending the answer.
   *
   * @example
   * ```ts
   * app.setErrorHandler((err, request, reply) => {
   *   const send = () => reply.code(413).send(problem);
   *   const unread = unreadBodiesOf(app.server).discard(request, reply);
   *   return unread.phase === UnreadBody.draining ? unread.drained.then(() => void send()) : send();
   * });
   * ```
   */
  discard(request: FastifyRequest, reply: FastifyReply): UnreadBodyPlan {
    const raw = request.raw;
    if (raw.complete || raw.destroyed) return { phase: UnreadBody.read };
    // No network connection under the request (fastify's `inject`: the body is handed over whole): nothing arrives.
    const socket = raw.socket as { destroy?: unknown } | null;
    if (typeof socket?.destroy !== 'function') return { phase: UnreadBody.read };
    const declared = declaredLength(raw);
    // A closing server hands no connection on, and a body this large is not worth reading to answer it.
    if (this.#closing || (declared !== null && declared > UNREAD_BODY_MAX_BYTES))
      return { phase: UnreadBody.closing };
    const giveUp = (reason: GaveUp, discarded: number) => {
      // Closing at shutdown is the expected end of every such connection; the other limits are the client's doing.
      if (reason !== GaveUp.closing)
        request.log.info(
          { reason, discarded, declared, limitBytes: UNREAD_BODY_MAX_BYTES, limitMs: UNREAD_BODY_MAX_MS },
          'closed a connection: the rest of a refused body did not arrive within the limits',
        );
    };
    // The client asked to close (or speaks HTTP/1.0): Node will close after the answer whatever is said here.
    if (!reply.raw.shouldKeepAlive) {
      const discard = this.#track(discardRest(raw, giveUp));
      return { phase: UnreadBody.draining, drained: discard.settled };
    }
    void reply.removeHeader('connection');
    this.#track(
      discardRest(raw, (reason, discarded) => {
        giveUp(reason, discarded);
        closeAfterAnswer(request, reply);
      }),
    );
    return { phase: UnreadBody.discarding };
  }

  /**
   * The server is closing: every body still being thrown away is given up — a connection whose answer went out
   * closes once it is written, an answer waiting for its body goes now (and its connection closes after it) — and
   * later refusals are answered `closing`. Call it from fastify's `preClose`, before the server waits for its
   * connections.
   *
   * @example
   * ```ts
   * app.addHook('preClose', (done) => { unreadBodiesOf(app.server).close(); done(); });
   * ```
   */
  close(): void {
    this.#closing = true;
    for (const discard of [...this.#discards]) discard.stop();
  }

  #track(discard: Discard): Discard {
    this.#discards.add(discard);
    void discard.settled.then(() => this.#discards.delete(discard));
    return discard;
  }
}

const byServer = new WeakMap<Server, UnreadBodies>();

/**
 * The {@link UnreadBodies} of one Node HTTP server: the problem-details plugin, fastify's `frameworkErrors` and
 * the plugin's `preClose` all reach the same one through the server a request arrived on.
 *
 * @example
 * ```ts
 * unreadBodiesOf(request.server.server).discard(request, reply);
 * ```
 */
export function unreadBodiesOf(server: Server): UnreadBodies {
  let bodies = byServer.get(server);
  if (bodies === undefined) {
    bodies = new UnreadBodies();
    byServer.set(server, bodies);
  }
  return bodies;
}
