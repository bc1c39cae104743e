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
  /** Too much is coming (or the server is closing): the connection closes after the answer. */
  closing: 'closing',
} as const;
export type UnreadBody = (typeof UnreadBody)[keyof typeof UnreadBody];

/** The declared body length, or null when the body is chunked (or the header is unusable). */
function declaredLength(request: IncomingMessage): number | null {
  const header = request.headers['content-length'];
  if (header === undefined) return null;
  const length = Number(header);
  return Number.isSafeInteger(length) && length >= 0 ? length : null;
}

/**
 * Prepares the answer to a request refused before its body was read (too large, not JSON, …), so that the client
 * gets it. fastify answers such a request with `connection: close` and Node then closes the socket with the body
 * still arriving: the peer's TCP stack answers the next bytes with a reset, which may erase the answer from the
 * client's buffers before it reads it (RFC 9112 § 9.6) — fetch then fails with `EPIPE`/`ECONNRESET` instead of
 * showing the 413. So the rest of the body is read and thrown away (never kept), the answer keeps the connection
 * open, and once the body has arrived the connection serves the next request. Bounded: a body declared over
 * {@link UNREAD_BODY_MAX_BYTES} is not waited for, and one that exceeds it or takes longer than
 * {@link UNREAD_BODY_MAX_MS} has its connection closed.
 *
 * Call it right before sending the answer.
 *
 * @example
 * ```ts
 * app.setErrorHandler((err, request, reply) => {
 *   discardUnreadBody(request, reply, { closing });
 *   return reply.code(413).send(problem);
 * });
 * ```
 */
export function discardUnreadBody(
  request: FastifyRequest,
  reply: FastifyReply,
  options: { closing: boolean },
): UnreadBody {
  const raw = request.raw;
  if (raw.complete || raw.destroyed) return UnreadBody.read;
  // No network connection under the request (fastify's `inject`: the body is handed over whole): nothing arrives.
  const socket = raw.socket as { destroy?: unknown } | null;
  if (typeof socket?.destroy !== 'function') return UnreadBody.read;
  const declared = declaredLength(raw);
  // A closing server hands no connection on, and a body this large is not worth reading to answer it.
  if (options.closing || (declared !== null && declared > UNREAD_BODY_MAX_BYTES)) return UnreadBody.closing;
  // The client asked to close (or speaks HTTP/1.0): Node will close after the answer whatever is said here.
  if (!reply.raw.shouldKeepAlive) return UnreadBody.closing;
  void reply.removeHeader('connection');
  let discarded = 0;
  const giveUp = () => raw.socket.destroy();
  const timer = setTimeout(giveUp, UNREAD_BODY_MAX_MS);
  timer.unref();
  const done = () => clearTimeout(timer);
  raw.on('data', (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded > UNREAD_BODY_MAX_BYTES) giveUp();
  });
  raw.once('end', done);
  raw.once('close', done);
  raw.resume();
  return UnreadBody.discarding;
}
