/**
 * The reconnect loop of the client's Server-Sent Event streams (the control plane's endpoint stream and an
 * endpoint's change feed): connect, read events, and after a dropped connection, `429` or `5xx` wait (backoff,
 * or the server's `retry-after`) and connect again; a refusal retrying cannot fix ends the stream with its
 * `SluiceClientError`. What differs per stream — its URL, its events, the state it resumes from — is passed in.
 * Internal to the package.
 */
import { ClientErrorCode, SluiceClientError } from './errors.js';
import { backoffMs, delay, errorFrom, type HttpTarget, headersFor } from './http.js';
import { readEventStream, type SseMessage } from './sse.js';

/**
 * Why a stream's connection is not up: the server could not be reached (or did not answer in time), it answered
 * the connection with an error, or an open connection ended, broke or went silent.
 */
export type ConnectionLoss = 'unreachable' | 'refused' | 'closed';

export interface EventStreamOptions<T> {
  /** Names the stream in errors ("The change feed has no body"). */
  what: string;
  /** Stops the stream (it also stops when the consumer's loop breaks). */
  signal?: AbortSignal;
  /** Reconnect backoff (default 250 ms doubling to 10 s, jittered). */
  backoff?: { initialMs?: number; maxMs?: number };
  /**
   * A connection that delivers nothing — no event, no heartbeat comment, no response headers — for this long while
   * the stream waits on it is taken for dead and replaced (default {@link DEFAULT_IDLE_TIMEOUT_MS}; 0 = never).
   */
  idleTimeoutMs?: number;
  /** The path and query of the next connection, asked before each (it may resume from where the last stopped). */
  path: () => string;
  /** Request headers of the next connection, asked before each (e.g. `sluice-min-position` until it is reached). */
  headers?: () => Record<string, string>;
  /**
   * Asked when the server refuses a connection with a status retrying may fix (`429`, `5xx`): true ends the stream
   * with that refusal instead of reconnecting (the change feed's `minPosition` deadline).
   */
  giveUp?: (refusal: SluiceClientError) => boolean;
  /** Before each connection attempt: an event to yield first, or null. */
  beforeConnect?: () => T | null;
  /** Called once a connection is accepted, before its events are read. */
  onOpen?: () => void;
  /**
   * Called when a connection attempt fails or an open connection is lost (not when `signal` stops the stream); the
   * stream then reconnects by itself (or ends, for a refusal retrying cannot fix), and `onOpen` says when it is up.
   * A refused connection comes with the server's refusal (its code and message: `429 QUEUE_FULL` names the bound
   * reached), so a caller can say why.
   */
  onConnectionLost?: (why: ConnectionLoss, refusal?: SluiceClientError) => void;
  /** Turns one SSE message into what the stream yields; null skips it. Runs while the connection is read. */
  decode: (message: SseMessage) => T | null;
  /**
   * When `decode` throws a `SluiceClientError` (an event that is not JSON): true ends the stream with it; false
   * treats it as a broken connection and reconnects (the change feed resumes from its last token).
   */
  endOnBadEvent: boolean;
}

/**
 * Three of the servers' default heartbeat intervals (15 s): both SSE streams send a comment at least that often, so
 * a connection silent for longer is gone — its server stopped or frozen, or a network path lost without a reset,
 * which TCP alone would not report for many minutes.
 */
export const DEFAULT_IDLE_TIMEOUT_MS = 45_000;

/** Why an idle connection was aborted (never surfaces: the stream reconnects). */
class IdleConnection extends Error {}

/**
 * `body`, read on demand, with `abort` called when a read waits longer than `idleMs` for the network. Only time
 * spent waiting for bytes counts: a consumer slow to ask for the next event does not make the connection idle.
 */
function watchIdle(
  body: ReadableStream<Uint8Array>,
  idleMs: number,
  abort: () => void,
): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const timer = setTimeout(abort, idleMs);
        try {
          const { value, done } = await reader.read();
          if (done) controller.close();
          else controller.enqueue(value);
        } finally {
          clearTimeout(timer);
        }
      },
      cancel: (reason) => reader.cancel(reason),
    },
    // Pulled only when the parser asks for more, so the timer runs only while somebody waits.
    { highWaterMark: 0 },
  );
}

/**
 * Yields the decoded events of the SSE stream at `target` + `options.path()`, reconnecting until `signal`
 * aborts, the consumer stops, or the server refuses in a way retrying cannot fix.
 *
 * @example
 * ```ts
 * yield* openEventStream(this.target, {
 *   what: 'The endpoint stream',
 *   path: () => '/v1/endpoints/stream',
 *   decode: (message) => toStreamEvent(message.event, message.data),
 *   endOnBadEvent: true,
 * });
 * ```
 */
export async function* openEventStream<T>(
  target: HttpTarget,
  options: EventStreamOptions<T>,
): AsyncGenerator<T> {
  const initialMs = options.backoff?.initialMs ?? 250;
  const maxMs = options.backoff?.maxMs ?? 10_000;
  const idleMs = options.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
  let attempt = 0;
  for (;;) {
    if (options.signal?.aborted) return;
    const controller = new AbortController();
    const stop = () => controller.abort(options.signal?.reason);
    options.signal?.addEventListener('abort', stop, { once: true });
    try {
      const first = options.beforeConnect?.() ?? null;
      if (first !== null) yield first;
      const idle = () => controller.abort(new IdleConnection('no bytes from the server'));
      // Asked for each connection: a token renewed since the last one (the server ends a feed at its token's
      // expiry) is the one this connection uses.
      const headers = await headersFor(target, { ...options.headers?.(), accept: 'text/event-stream' });
      let res: Response;
      // A server that accepted the connection but never answers (stopped) is as dead as a silent stream.
      const headersTimer = idleMs > 0 ? setTimeout(idle, idleMs) : undefined;
      try {
        res = await target.fetch(`${target.baseUrl}${options.path()}`, {
          headers,
          signal: controller.signal,
        });
      } catch {
        if (options.signal?.aborted) return;
        options.onConnectionLost?.('unreachable');
        await delay(backoffMs(attempt++, initialMs, maxMs), options.signal).catch(() => undefined);
        continue;
      } finally {
        clearTimeout(headersTimer);
      }
      if (!res.ok) {
        const error = await errorFrom(res);
        options.onConnectionLost?.('refused', error);
        // Refusals that will not change by retrying (bad token, filter, auth, unknown endpoint) end the stream.
        if (res.status < 500 && res.status !== 429) throw error;
        if (options.giveUp?.(error)) throw error;
        await delay(error.retryAfterMs ?? backoffMs(attempt++, initialMs, maxMs), options.signal).catch(
          () => undefined,
        );
        continue;
      }
      if (!res.body)
        throw new SluiceClientError(ClientErrorCode.BAD_RESPONSE, `${options.what} has no body`, {
          status: res.status,
        });
      options.onOpen?.();
      try {
        const body = idleMs > 0 ? watchIdle(res.body, idleMs, idle) : res.body;
        for await (const message of readEventStream(body)) {
          attempt = 0;
          const event = options.decode(message);
          if (event !== null) yield event;
        }
      } catch (err) {
        if (options.signal?.aborted) return;
        if (options.endOnBadEvent && err instanceof SluiceClientError) throw err;
        // the connection broke, or went silent (aborted by the idle watch): reconnect below
      }
      if (options.signal?.aborted) return;
      options.onConnectionLost?.('closed');
      await delay(backoffMs(attempt++, initialMs, maxMs), options.signal).catch(() => undefined);
    } finally {
      options.signal?.removeEventListener('abort', stop);
      controller.abort();
    }
  }
}
