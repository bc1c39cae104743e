/**
 * Server-Sent Events framing (the WHATWG `text/event-stream` format). Data is JSON on one line (JSON.stringify
 * never emits a raw newline), so every event is `id:` (optional), `event:`, one `data:` line and a blank line.
 */
import type { ChangeEntry } from '@sluice/core';
import { visibleCommitPosition } from '../visible-positions.js';
import { encodeFeedToken } from './token.js';

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

/**
 * Frames one log entry of `generation`. `rowFiltered`: for a subscriber whose token has a row filter, a `commit`
 * carries only the positions it may see (visible-positions.ts: no record counters, no file line counts).
 */
export function entryFrame(
  alias: string,
  generation: string,
  entry: ChangeEntry,
  rowFiltered = false,
  /** The subscriber's view (token.ts): carried by the event's token; absent for an unfiltered subscriber. */
  view?: string,
): string {
  const id = encodeFeedToken({ endpoint: alias, generation, seq: entry.seq, ...(view ? { view } : {}) });
  return entryFrameWithId(entry, id, rowFiltered);
}

/** {@link entryFrame} with the event's `id` given (a filtered subscriber's token: its view, sealed or not). */
export function entryFrameWithId(entry: ChangeEntry, id: string, rowFiltered: boolean): string {
  if (entry.op === 'upsert') return sseFrame(FeedEvent.upsert, { key: entry.key, record: entry.record }, id);
  if (entry.op === 'delete') return sseFrame(FeedEvent.delete, { key: entry.key }, id);
  return commitFrame(entry.position, entry.epoch, id, rowFiltered);
}

/**
 * An entry's shared frame (from {@link entryFrame}, which writes the `id` line first) with another `id`: a filtered
 * subscriber's tokens carry its view, while the event itself — the record's JSON, framed once — is the same.
 */
export function withId(frame: string, id: string): string {
  return `id: ${id}${frame.slice(frame.indexOf('\n'))}`;
}

/** A `commit` event at `position`, left out as {@link visibleCommitPosition} says for a row-filtered subscriber. */
export function commitFrame(
  position: Record<string, unknown> | null,
  epoch: number | null,
  id: string,
  rowFiltered: boolean,
): string {
  return sseFrame(FeedEvent.commit, { position: visibleCommitPosition(position, rowFiltered), epoch }, id);
}

/** A comment line: keeps idle connections (and proxies) alive; EventSource ignores it. */
export const HEARTBEAT_FRAME = Buffer.from(': heartbeat\n\n');

/** A comment line (one line: line breaks in `text` become spaces); EventSource ignores it. */
export function commentFrame(text: string): string {
  return `: ${text.replace(/[\r\n]+/g, ' ')}\n\n`;
}

/** The comment a feed ends with when its bearer token expires (expiry.ts): for whoever reads the raw stream. */
export const TOKEN_EXPIRED_FRAME =
  ': the bearer token expired; reconnect with a renewed one and the last event id\n\n';

/** Sent first: how long a browser's EventSource waits before reconnecting. */
export const RETRY_FRAME = 'retry: 1000\n\n';
