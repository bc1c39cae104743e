/**
 * A minimal HTTP client for node-to-node calls. Each call uses a fresh connection (no keep-alive pool): a pooled
 * socket that the peer closed for idleness would fail like a dead peer, and here "the peer is dead" is an answer
 * with consequences (another node takes the transfer over), so it must only come from a real refusal or timeout.
 */
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

export interface HttpResult {
  status: number;
  body: string;
}

/** How a call failed at the transport level. */
export type HttpFailureKind =
  /** Refused, or the host unreachable/unknown: nothing listens there, so nothing runs there. */
  | 'unreachable'
  /** The connection was reset or broke off after it was made: something listens, we cannot tell what it runs. */
  | 'reset'
  /** No complete answer within the time allowed (see {@link HttpCallError.connected}). */
  | 'timeout'
  /** Anything else (bad URL, TLS failure, oversized reply…): we cannot tell. */
  | 'error';

/**
 * A failed node-to-node call: `kind` says how, `connected` whether a TCP connection to the peer was made first
 * (a timeout on a reachable peer is a silent owner; one while connecting is an unreachable network).
 */
export class HttpCallError extends Error {
  readonly kind: HttpFailureKind;
  readonly connected: boolean;
  constructor(kind: HttpFailureKind, message: string, options?: ErrorOptions & { connected?: boolean }) {
    super(message, options);
    this.name = 'HttpCallError';
    this.kind = kind;
    this.connected = options?.connected ?? false;
  }
}

/** Nothing listens at the address (a definite answer). */
const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND']);
/** The connection was made and then broke: a live peer (restarting, overloaded) may be behind it. */
const RESET_CODES = new Set(['ECONNRESET', 'EPIPE']);

/**
 * Calls `url` and resolves with the status and body (at most `maxBytes`), or rejects with an {@link HttpCallError}.
 *
 * @example
 * ```ts
 * const { status, body } = await callHttp('http://10.0.0.5:7070/v1/internal/transfers/t1/owner', 'GET', { timeoutMs: 500 });
 * ```
 */
export function callHttp(
  url: string,
  method: 'GET' | 'POST',
  options: { timeoutMs: number; headers?: Record<string, string>; maxBytes: number },
): Promise<HttpResult> {
  let target: URL;
  try {
    target = new URL(url);
  } catch (err) {
    return Promise.reject(new HttpCallError('error', `invalid URL ${JSON.stringify(url)}`, { cause: err }));
  }
  if (target.protocol !== 'http:' && target.protocol !== 'https:') {
    return Promise.reject(new HttpCallError('error', `unsupported protocol ${target.protocol}`));
  }
  const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<HttpResult>((resolve, reject) => {
    let settled = false;
    const finish = (outcome: { ok: HttpResult } | { err: HttpCallError }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if ('ok' in outcome) resolve(outcome.ok);
      else reject(outcome.err);
    };
    const req = send(target, {
      method,
      agent: false,
      headers: { accept: 'application/json', 'content-length': '0', ...options.headers },
    });
    let connected = false;
    req.on('socket', (socket) => {
      if (!socket.connecting) connected = true;
      else socket.once('connect', () => (connected = true));
    });
    const timer = setTimeout(() => {
      finish({
        err: new HttpCallError('timeout', `no answer from ${target.origin} within ${options.timeoutMs} ms`, {
          connected,
        }),
      });
      req.destroy();
    }, options.timeoutMs);
    req.on('error', (err: NodeJS.ErrnoException) => {
      const code = err.code ?? '';
      const kind: HttpFailureKind = UNREACHABLE_CODES.has(code)
        ? 'unreachable'
        : RESET_CODES.has(code) || (connected && code === 'UND_ERR_SOCKET')
          ? 'reset'
          : 'error';
      finish({
        err: new HttpCallError(kind, `${method} ${target.origin}: ${err.code ?? err.message}`, {
          cause: err,
          connected,
        }),
      });
    });
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.byteLength;
        if (size > options.maxBytes) {
          finish({
            err: new HttpCallError('error', `reply from ${target.origin} exceeds ${options.maxBytes} bytes`),
          });
          req.destroy();
          return;
        }
        chunks.push(chunk);
      });
      res.on('end', () =>
        finish({ ok: { status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') } }),
      );
      res.on('error', (err) =>
        finish({
          err: new HttpCallError('reset', `reply from ${target.origin} broke off`, { cause: err, connected }),
        }),
      );
    });
    req.end();
  });
}
