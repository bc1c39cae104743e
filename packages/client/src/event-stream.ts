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

export interface EventStreamOptions<T> {
  /** Names the stream in errors ("The change feed has no body"). */
  what: string;
  /** Stops the stream (it also stops when the consumer's loop breaks). */
  signal?: AbortSignal;
  /** Reconnect backoff (default 250 ms doubling to 10 s, jittered). */
  backoff?: { initialMs?: number; maxMs?: number };
  /** The path and query of the next connection, asked before each (it may resume from where the last stopped). */
  path: () => string;
  /** Before each connection attempt: an event to yield first, or null. */
  beforeConnect?: () => T | null;
  /** Called once a connection is accepted, before its events are read. */
  onOpen?: () => void;
  /** Turns one SSE message into what the stream yields; null skips it. Runs while the connection is read. */
  decode: (message: SseMessage) => T | null;
  /**
   * When `decode` throws a `SluiceClientError` (an event that is not JSON): true ends the stream with it; false
   * treats it as a broken connection and reconnects (the change feed resumes from its last token).
   */
  endOnBadEvent: boolean;
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
  let attempt = 0;
  for (;;) {
    if (options.signal?.aborted) return;
    const controller = new AbortController();
    const stop = () => controller.abort(options.signal?.reason);
    options.signal?.addEventListener('abort', stop, { once: true });
    try {
      const first = options.beforeConnect?.() ?? null;
      if (first !== null) yield first;
      let res: Response;
      try {
        res = await target.fetch(`${target.baseUrl}${options.path()}`, {
          headers: headersFor(target, { accept: 'text/event-stream' }),
          signal: controller.signal,
        });
      } catch {
        if (options.signal?.aborted) return;
        await delay(backoffMs(attempt++, initialMs, maxMs), options.signal).catch(() => undefined);
        continue;
      }
      if (!res.ok) {
        const error = await errorFrom(res);
        // Refusals that will not change by retrying (bad token, filter, auth, unknown endpoint) end the stream.
        if (res.status < 500 && res.status !== 429) throw error;
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
        for await (const message of readEventStream(res.body)) {
          attempt = 0;
          const event = options.decode(message);
          if (event !== null) yield event;
        }
      } catch (err) {
        if (options.signal?.aborted) return;
        if (options.endOnBadEvent && err instanceof SluiceClientError) throw err;
        // the connection broke: reconnect below
      }
      if (options.signal?.aborted) return;
      await delay(backoffMs(attempt++, initialMs, maxMs), options.signal).catch(() => undefined);
    } finally {
      options.signal?.removeEventListener('abort', stop);
      controller.abort();
    }
  }
}
