import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import {
  HeadersTooLargeError,
  MethodNotAllowedError,
  NotFoundError,
  PROBLEM_CONTENT_TYPE,
  RequestTimeoutError,
  ShuttingDownError,
  type SluiceError,
  toProblem,
  ValidationError,
} from '@sluice/core';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { allowedMethods } from './allowed-methods.js';
import { headerLinesProblem } from './header-lines.js';
import { useJsonBodies } from './json-body.js';
import { normalizeHttpError } from './normalize.js';
import { queryParametersProblem } from './query-params.js';
import { UnreadBody, unreadBodiesOf } from './unread-body.js';

/** Options of {@link problemDetailsPlugin}. */
export interface ProblemDetailsOptions {
  /** Largest JSON body accepted, in bytes; a larger one is 413 `PAYLOAD_TOO_LARGE` naming this limit. */
  bodyLimit: number;
  /** The router's longest path parameter (`routerOptions.maxParamLength`), named when a path exceeds it. */
  maxParamLength?: number;
}

/**
 * Longest request path echoed as a problem's `instance` (8 KiB record keys make longer ones possible).
 *
 * @example
 * ```ts
 * problemInstance(`/${'k'.repeat(MAX_INSTANCE_LENGTH)}`); // undefined
 * ```
 */
export const MAX_INSTANCE_LENGTH = 512;

/** The request path without its query string: queries may carry cursors or filters that do not belong in errors. */
function pathOf(url: string): string {
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

/**
 * The `instance` member of a problem about `url`: the request path without its query string, omitted when longer
 * than {@link MAX_INSTANCE_LENGTH} (a clipped path would name another resource).
 *
 * @example
 * ```ts
 * problemInstance('/v1/transfers?limit=5'); // '/v1/transfers'
 * ```
 */
export function problemInstance(url: string): string | undefined {
  const path = pathOf(url);
  return path.length > MAX_INSTANCE_LENGTH ? undefined : path;
}

/** Seconds a client should wait before retrying, for errors that say so (`QUEUE_FULL`, `POSITION_NOT_REACHED`). */
function retryAfterOf(error: SluiceError): number | undefined {
  const seconds = (error as { retryAfterSeconds?: unknown }).retryAfterSeconds;
  return typeof seconds === 'number' && Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined;
}

/** The methods a 405 lists in its `Allow` header (RFC 9110 § 15.5.6: a 405 must send one). */
function allowOf(error: SluiceError): string[] | undefined {
  if (error.code !== 'METHOD_NOT_ALLOWED') return undefined;
  const allow = (error as { allow?: unknown }).allow;
  return Array.isArray(allow) && allow.every((method) => typeof method === 'string') ? allow : undefined;
}

/**
 * Sends `err` as an RFC 9457 problem: normalized to a Sluice error, status from core's mapping of its code,
 * `www-authenticate: Bearer` on 401, `allow` on 405, `retry-after` when the error carries one. 503s are expected conditions
 * (shutting down, a store or backplane outage) and log a warning without a stack; other 5xx log the error.
 * A request refused before its body was read has the rest of it thrown away, so the client gets the answer
 * (`unread-body.ts`); when the client asked to close, the answer waits for that (the promise settles once sent).
 */
function sendProblem(
  err: unknown,
  request: FastifyRequest,
  reply: FastifyReply,
  options: ProblemDetailsOptions,
): FastifyReply | Promise<void> {
  const error = normalizeHttpError(err, {
    contentType: request.headers['content-type'],
    bodyLimit: options.bodyLimit,
    ...(options.maxParamLength === undefined ? {} : { maxParamLength: options.maxParamLength }),
  });
  const url = problemInstance(request.url);
  const { status, body } = toProblem(error, url);
  if (status === 503)
    request.log.warn({ code: body.code, detail: body.detail, url }, 'request refused: unavailable');
  else if (status >= 500) request.log.error({ err, code: body.code, url }, 'request failed');
  if (status === 401) void reply.header('www-authenticate', 'Bearer');
  const allow = allowOf(error);
  if (allow !== undefined) void reply.header('allow', allow.join(', '));
  const retryAfter = retryAfterOf(error);
  if (retryAfter !== undefined) void reply.header('retry-after', String(retryAfter));
  const send = () => reply.code(status).type(PROBLEM_CONTENT_TYPE).send(body);
  const unread = unreadBodiesOf(request.server.server).discard(request, reply);
  if (unread.phase !== UnreadBody.draining) return send();
  // The client asked to close: the answer goes once its body has arrived (a client that left gets none).
  return unread.drained.then(() => {
    if (!request.raw.socket.destroyed) send();
  });
}

/**
 * fastify's `frameworkErrors` option answering the router's own refusals as problems: a malformed percent-encoding
 * (`FST_ERR_BAD_URL`) and a path parameter over `maxParamLength` (`FST_ERR_MAX_PARAM_LENGTH`) are
 * `400 VALIDATION_FAILED`. The router raises them before any route or error handler runs, so the plugin cannot
 * reach them: without this option fastify answers with a body of its own shape that quotes the whole path.
 *
 * @example
 * ```ts
 * const app = Fastify({
 *   routerOptions: { maxParamLength: 9_000 },
 *   frameworkErrors: problemFrameworkErrors({ bodyLimit, maxParamLength: 9_000 }),
 * });
 * await app.register(problemDetailsPlugin, { bodyLimit });
 * ```
 */
export function problemFrameworkErrors(
  options: ProblemDetailsOptions,
): (error: Error, request: FastifyRequest, reply: FastifyReply) => void {
  return (error, request, reply) => {
    void sendProblem(error, request, reply, options);
  };
}

/** The problem for a request Node's HTTP parser refused, by the parser's error code. */
function clientErrorProblem(err: NodeJS.ErrnoException): SluiceError {
  if (err.code === 'HPE_HEADER_OVERFLOW') return new HeadersTooLargeError();
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return new RequestTimeoutError();
  return new ValidationError('The request is not valid HTTP/1.1', [
    { path: 'request', message: err.code === undefined ? 'malformed' : `malformed (${err.code})` },
  ]);
}

/**
 * fastify's `clientErrorHandler` option answering what Node's HTTP parser refuses — a header block over the limit
 * (431 `HEADERS_TOO_LARGE`), bytes that are not HTTP or a malformed header (400 `VALIDATION_FAILED`), a request
 * not received in time (408 `REQUEST_TIMEOUT`) — as problems, then closing the connection (its framing is lost).
 * No request object exists yet, so no route, hook or error handler sees these: fastify's default handler wrote a
 * body of its own shape.
 *
 * @example
 * ```ts
 * const app = Fastify({ clientErrorHandler: problemClientErrors });
 * ```
 */
export function problemClientErrors(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Duplex): void {
  // A reset connection has nobody to answer (Node's own handler does the same).
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const { status, body } = toProblem(clientErrorProblem(err));
  this.log.debug({ code: err.code, status }, 'refused a request the HTTP parser could not read');
  if (socket.writable) {
    const text = JSON.stringify(body);
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: ${PROBLEM_CONTENT_TYPE}; charset=utf-8\r\n` +
        `content-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`,
    );
  }
  socket.destroy(err);
}

/**
 * An HTTP/1.1 request without `Host`, which a server must refuse with 400 (RFC 9112 § 3.2). Node's own check
 * (`requireHostHeader`) answers it with an empty body before any handler runs, so the apps turn it off (see
 * {@link PROBLEM_HTTP_OPTIONS}) and this plugin refuses it as a problem instead.
 */
function missesHost(request: FastifyRequest): boolean {
  const raw = request.raw;
  return raw.httpVersionMajor === 1 && raw.httpVersionMinor === 1 && request.headers.host === undefined;
}

function missingHostProblem(): ValidationError {
  return new ValidationError('An HTTP/1.1 request must send a Host header (RFC 9112 § 3.2)', [
    { path: 'headers.host', message: 'required in HTTP/1.1' },
  ]);
}

/**
 * The Node HTTP server options an app using {@link problemDetailsPlugin} passes as fastify's `http` option: Node's
 * `requireHostHeader` answers a request without `Host` with a bare 400 before fastify sees it; off, the plugin
 * refuses it as a problem (400 `VALIDATION_FAILED` at `headers.host`).
 *
 * @example
 * ```ts
 * const app = Fastify({ http: { ...PROBLEM_HTTP_OPTIONS }, return503OnClosing: false });
 * await app.register(problemDetailsPlugin, { bodyLimit });
 * ```
 */
export const PROBLEM_HTTP_OPTIONS = { requireHostHeader: false } as const;

async function problemDetails(app: FastifyInstance, options: ProblemDetailsOptions): Promise<void> {
  useJsonBodies(app, options.bodyLimit);
  // A request that reaches a closing server (pipelined, or on a busy keep-alive connection) is refused as a
  // problem like any other: fastify's own `return503OnClosing` answers with a body of its own shape, so the
  // apps turn it off and this hook answers instead (fastify still adds `connection: close`).
  // The same state tells a refusal during the close to close its connection (`unread-body.ts`), and ends the wait for
  // bodies whose answers went out: a client that never sends the rest of one must not hold the shutdown.
  const unread = unreadBodiesOf(app.server);
  app.addHook('preClose', (done) => {
    unread.close();
    done();
  });
  // Node answers an `Expect` other than 100-continue with a bare 417 before any handler runs, unless someone listens
  // for it: hand such a request to the server's handler like any other, for the hook below to refuse as a problem.
  app.server.on('checkExpectation', (request, response) => app.server.emit('request', request, response));
  // A callback hook, not an async one: it runs on every request, and an async hook costs a promise each time.
  app.addHook('onRequest', (request, _reply, done) => {
    if (unread.closing) done(new ShuttingDownError());
    else if (missesHost(request)) done(missingHostProblem());
    else
      done(
        headerLinesProblem(request.headers, request.raw.rawHeaders) ??
          queryParametersProblem(request.query) ??
          undefined,
      );
  });
  app.setErrorHandler((err, request, reply) => sendProblem(err, request, reply, options));
  // No route took the request: a path some route has with another method is that method's 405 (a 404 would send
  // the client looking for another path), anything else 404. Both apps' fast routes below fastify leave every
  // other method to fastify, so this answers for their paths too.
  app.setNotFoundHandler((request, reply) => {
    const allow = allowedMethods(app, request.url);
    const error =
      allow.length > 0
        ? new MethodNotAllowedError(request.method, allow)
        : new NotFoundError(`No route ${request.method} ${pathOf(request.url).slice(0, 256)}`);
    return sendProblem(error, request, reply, options);
  });
}

/**
 * The HTTP error shell both Sluice apps share, as a fastify plugin that applies to the instance it is registered
 * on (fastify-plugin: no encapsulation, so register it on the root before the routes):
 * - JSON bodies only (`application/json`, `application/*+json`) up to `bodyLimit`, parsed with plain `JSON.parse`;
 *   anything else is 415, an empty or malformed body `MALFORMED_JSON`, a larger one 413;
 * - every error, fastify's own included, answered as `application/problem+json` with a stable `code`, its status
 *   looked up from that code by core, and `instance` = the request path;
 * - unknown routes answered `404 NOT_FOUND` the same way, and a known path asked with a method it does not have
 *   `405 METHOD_NOT_ALLOWED` with `Allow` listing the methods it has (`HEAD` beside `GET`);
 * - `www-authenticate: Bearer` on 401, `allow` on 405, `retry-after` where the error says when; 503 logged as a
 *   warning;
 * - requests that arrive once the server is closing answered `503 NODE_SHUTTING_DOWN` (create the instance with
 *   `return503OnClosing: false`, or fastify answers them first with a body of its own);
 * - a request with two `Host`, `Content-Type` or `Authorization` lines, or an `Expect` other than `100-continue`,
 *   refused `400 VALIDATION_FAILED` at `headers.<name>` (`header-lines.ts`) — Node would read the first line only,
 *   and answer an unmet expectation with a bare 417;
 * - a query parameter sent more than once refused `400 VALIDATION_FAILED` at `querystring.<name>`
 *   (`query-params.ts`): every parameter takes one value.
 *
 * @example
 * ```ts
 * const app = Fastify({ bodyLimit: config.limits.bodyBytes, return503OnClosing: false });
 * await app.register(problemDetailsPlugin, { bodyLimit: config.limits.bodyBytes });
 * app.get('/v1/things/:id', async () => { throw new NotFoundError('No such thing') });
 * ```
 */
export const problemDetailsPlugin = fp(problemDetails, {
  name: '@sluice/http/problem-details',
  fastify: '5.x',
});
