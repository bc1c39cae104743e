import type { IncomingMessage } from 'node:http';
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

/**
 * Reads the rest of `raw`'s body and throws it away (never kept), bounded by {@link UNREAD_BODY_MAX_BYTES} and
 * {@link UNREAD_BODY_MAX_MS}; `onLimit` runs when a bound is hit first. Settles once the body has arrived, the
 * request is gone, or a bound was hit.
 */
function discardRest(raw: IncomingMessage, onLimit: () => void): Promise<void> {
  return new Promise((settled) => {
    let discarded = 0;
    const done = () => {
      clearTimeout(timer);
      settled();
    };
    const giveUp = () => {
      done();
      onLimit();
    };
    const timer = setTimeout(giveUp, UNREAD_BODY_MAX_MS);
    timer.unref();
    raw.on('data', (chunk: Buffer) => {
      discarded += chunk.length;
      if (discarded > UNREAD_BODY_MAX_BYTES) giveUp();
    });
    raw.once('end', done);
    raw.once('close', done);
    raw.resume();
  });
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
 * Bounded: a body declared over {@link UNREAD_BODY_MAX_BYTES}, or a closing server, is not waited for (`closing`),
 * and one that exceeds it or takes longer than {@link UNREAD_BODY_MAX_MS} has its connection closed (a keep-alive
 * one at once; a draining one right after its answer, which then goes without waiting longer).
 *
 * Call it right before sending the answer.
 *
 * @example
 * ```ts
 * app.setErrorHandler((err, request, reply) => {
 *   const send = () => reply.code(413).send(problem);
 *   const unread = discardUnreadBody(request, reply, { closing });
 *   return unread.phase === UnreadBody.draining ? unread.drained.then(() => void send()) : send();
 * });
 * ```
 */
export function discardUnreadBody(
  request: FastifyRequest,
  reply: FastifyReply,
  options: { closing: boolean },
): UnreadBodyPlan {
  const raw = request.raw;
  if (raw.complete || raw.destroyed) return { phase: UnreadBody.read };
  // No network connection under the request (fastify's `inject`: the body is handed over whole): nothing arrives.
  const socket = raw.socket as { destroy?: unknown } | null;
  if (typeof socket?.destroy !== 'function') return { phase: UnreadBody.read };
  const declared = declaredLength(raw);
  // A closing server hands no connection on, and a body this large is not worth reading to answer it.
  if (options.closing || (declared !== null && declared > UNREAD_BODY_MAX_BYTES))
    return { phase: UnreadBody.closing };
  // The client asked to close (or speaks HTTP/1.0): Node will close after the answer whatever is said here.
  if (!reply.raw.shouldKeepAlive) return { phase: UnreadBody.draining, drained: discardRest(raw, () => {}) };
  void reply.removeHeader('connection');
  void discardRest(raw, () => raw.socket.destroy());
  return { phase: UnreadBody.discarding };
}
