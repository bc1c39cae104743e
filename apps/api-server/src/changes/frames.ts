/**
 * Server-Sent Events framing (the WHATWG `text/event-stream` format). Data is JSON on one line (JSON.stringify
 * never emits a raw newline), so every event is `id:` (optional), `event:`, one `data:` line and a blank line.
 */

/** The event types of a change feed. */
export const FeedEvent = {
  upsert: 'upsert',
  delete: 'delete',
  commit: 'commit',
  live: 'live',
  switch: 'switch',
  reset: 'reset',
} as const;
export type FeedEvent = (typeof FeedEvent)[keyof typeof FeedEvent];

/** One SSE event as text. */
export function sseFrame(event: FeedEvent, data: unknown, id?: string): string {
  const head = id === undefined ? '' : `id: ${id}\n`;
  return `${head}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** A comment line: keeps idle connections (and proxies) alive; EventSource ignores it. */
export const HEARTBEAT_FRAME = Buffer.from(': heartbeat\n\n');

/** Sent first: how long a browser's EventSource waits before reconnecting. */
export const RETRY_FRAME = 'retry: 1000\n\n';
