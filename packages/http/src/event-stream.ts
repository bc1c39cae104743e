import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

/** The headers of every Server-Sent Events answer both apps send (no caching, no proxy buffering). */
export const EVENT_STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
} as const;

/**
 * Writes the head of a `200` event stream (`headers` first, then {@link EVENT_STREAM_HEADERS}) with
 * `Connection: close`: the server ends a stream only when it stops (or the stream's token expires), and a
 * connection kept alive after that would be reused by the client's pool for its reconnect — behind a TCP load
 * balancer, a connection pinned to the very server that is stopping, whose close then resets the resume.
 *
 * @example
 * ```ts
 * reply.hijack();
 * startEventStream(reply.raw, { 'sluice-cache': lease.cache });
 * reply.raw.write('retry: 1000\n\n');
 * ```
 */
export function startEventStream(res: ServerResponse, headers: OutgoingHttpHeaders = {}): void {
  // Node then sends `Connection: close` and closes the connection once the stream ends.
  res.shouldKeepAlive = false;
  res.writeHead(200, { ...headers, ...EVENT_STREAM_HEADERS });
}
