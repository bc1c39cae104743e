import { ClientErrorCode, type ProblemBody, SluiceClientError } from './errors.js';

/**
 * A bearer token: the token itself, or a function asked for it before each request and each (re)connection of a
 * stream — so a client whose tokens expire (a change feed is ended when its token does) goes on with renewed ones.
 * `undefined` sends no `authorization` header; an empty string is refused (`INVALID_TOKEN`), never sent as none.
 *
 * @example
 * ```ts
 * createClient({ queryUrl, token: async () => (await myIssuer.current()).jwt });
 * ```
 */
export type TokenSource = string | (() => string | undefined | Promise<string | undefined>);

/** How the client reaches one of the two APIs. */
export interface HttpTarget {
  baseUrl: string;
  token?: TokenSource | undefined;
  fetch: typeof globalThis.fetch;
  /** How long one request may take to be answered in full, in ms; 0 = no limit ({@link DEFAULT_TIMEOUT_MS}). */
  timeoutMs: number;
}

/**
 * Default deadline of one request (not of a stream: those have `idleTimeoutMs`). A server that accepted the
 * connection and stopped (SIGSTOP, a frozen VM, a path lost without a reset) otherwise holds the caller for as
 * long as the platform lets it — about 5 minutes in Node, forever in a browser.
 */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** `retry-after` (seconds or an HTTP date) in ms, or null. */
export function retryAfterMs(header: string | null, now = Date.now()): number | null {
  if (header === null || header.trim() === '') return null;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(header);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/** The headers of a request to `target`: `extra`, and the bearer token its {@link TokenSource} gives now. */
export async function headersFor(
  target: HttpTarget,
  extra: Record<string, string> = {},
): Promise<Record<string, string>> {
  const token = typeof target.token === 'function' ? await target.token() : target.token;
  // createClient refuses an empty string given as the token; one a function returns is refused here, per request.
  if (token === '')
    throw new SluiceClientError(
      ClientErrorCode.INVALID_TOKEN,
      'The token function returned an empty string, which would send the request with no token; return the token, or undefined to send none',
    );
  return { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }), ...extra };
}

/** Turns a non-2xx answer into a typed error with the server's `code`. */
export async function errorFrom(res: Response): Promise<SluiceClientError> {
  const text = await res.text().catch(() => '');
  let problem: ProblemBody | null = null;
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed && typeof parsed === 'object') problem = parsed as ProblemBody;
  } catch {
    // not JSON: keep the text as the message
  }
  const code = typeof problem?.code === 'string' ? problem.code : `HTTP_${res.status}`;
  const message = problem?.detail ?? (text.slice(0, 500) || `HTTP ${res.status}`);
  return new SluiceClientError(code, message, {
    status: res.status,
    problem,
    retryAfterMs: retryAfterMs(res.headers.get('retry-after')),
  });
}

/**
 * Why a fetch failed, as a person can act on it: Node's fetch says only "fetch failed" and keeps the reason
 * (`connect ECONNREFUSED 127.0.0.1:8080`, a DNS failure) in its `cause`; a browser's error has none to add.
 */
function networkReason(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const cause = err instanceof Error ? err.cause : undefined;
  const why = cause instanceof Error ? cause.message : '';
  return why && why !== message ? `${message} (${why})` : message;
}

/**
 * A signal that aborts when `signal` does or `timeoutMs` (> 0) has passed, and whether the deadline was the cause.
 * Built by hand: `AbortSignal.any` is missing from browsers the client still runs in.
 */
function deadlineSignal(signal: AbortSignal | undefined, timeoutMs: number) {
  const controller = new AbortController();
  let timedOut = false;
  const stop = () => controller.abort(signal?.reason);
  if (signal?.aborted) stop();
  else signal?.addEventListener('abort', stop, { once: true });
  const timer =
    timeoutMs > 0
      ? setTimeout(() => {
          timedOut = true;
          controller.abort(new Error(`no answer within ${timeoutMs} ms`));
        }, timeoutMs)
      : undefined;
  return {
    signal: controller.signal,
    timedOut: () => timedOut && !signal?.aborted,
    dispose: () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', stop);
    },
  };
}

/**
 * One request: JSON in and out; network failures are `NETWORK_ERROR`, no full answer within `timeoutMs` (default:
 * the target's) `TIMEOUT`, non-2xx the server's code. An abort of `signal` rejects with the signal's reason.
 */
export async function requestJson<T>(
  target: HttpTarget,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
  extraHeaders: Record<string, string> = {},
  signal?: AbortSignal,
  timeoutMs: number = target.timeoutMs,
): Promise<{ status: number; body: T; headers: Headers }> {
  const url = `${target.baseUrl}${path}`;
  const deadline = deadlineSignal(signal, timeoutMs);
  // A failure before the whole answer was read: the caller's abort as it is, else a typed client error.
  const failure = (err: unknown) => {
    if (signal?.aborted) return err;
    if (deadline.timedOut())
      return new SluiceClientError(
        ClientErrorCode.TIMEOUT,
        `${method} ${url}: no answer within ${timeoutMs} ms (timeoutMs)`,
        { cause: err },
      );
    return new SluiceClientError(ClientErrorCode.NETWORK_ERROR, `${method} ${url}: ${networkReason(err)}`, {
      cause: err,
    });
  };
  let res: Response;
  let text: string;
  try {
    res = await target.fetch(url, {
      method,
      headers: await headersFor(target, {
        accept: 'application/json',
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...extraHeaders,
      }),
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: deadline.signal,
    });
    // The deadline covers the body too: a server may stop after its headers.
    if (!res.ok) throw await errorFrom(res);
    text = await res.text();
  } catch (err) {
    if (err instanceof SluiceClientError) throw err;
    throw failure(err);
  } finally {
    deadline.dispose();
  }
  try {
    return { status: res.status, body: (text === '' ? null : JSON.parse(text)) as T, headers: res.headers };
  } catch (err) {
    throw new SluiceClientError(ClientErrorCode.BAD_RESPONSE, `${method} ${path}: the answer is not JSON`, {
      status: res.status,
      cause: err,
    });
  }
}

/** Waits `ms`, or rejects when `signal` aborts. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Exponential backoff with jitter: attempt 0 → about `initialMs`, doubling up to `maxMs`. */
export function backoffMs(attempt: number, initialMs: number, maxMs: number): number {
  const base = Math.min(maxMs, initialMs * 2 ** attempt);
  return Math.round(base / 2 + Math.random() * (base / 2));
}
