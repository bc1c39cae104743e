/**
 * What a row-filtered reader may see of a checkpoint's positions. A checkpoint records, per DAG node, where it
 * stands — and most of that counts or measures records: the cache sink's `written` / `read` / `bad` (and its last bad
 * record's reason), a file source's `line`, `offset` and `read`, a processor's `processed`, a JetStream source's
 * stream `seq`, a polled table's `read` and last key or cursor value. Each tells a token whose row filter hides
 * records how many exist (or names one), which its `recordCount` and its `count` already refuse to tell.
 *
 * So under a row filter only what read-your-writes needs stays: a replication source's LSN, as `{ lsn }` — the one
 * position `sluice-position` / `sluice-min-position` compare (freshness.ts, `positionsOf`). An LSN is a place in
 * the database's write-ahead log, shared by every table of the database, not a count of this endpoint's records.
 * Everything else is left out, whatever its node (an allow-list: a position a future source adds is hidden until it
 * is known to be harmless). A reader without a row filter sees every record anyway and keeps every position.
 */
import type { PipelineCheckpoint } from '@sluice/core';
import { isLsn } from './freshness.js';

type Positions = Record<string, unknown>;

/**
 * `positions` as a row-filtered reader may see them: `{ [handle]: { lsn } }` for each replication source, nothing
 * else. Memoized per positions object (a generation's commit state, and a change-log entry read by many feeds,
 * hand out the same object each time).
 *
 * @example
 * ```ts
 * visiblePositions({ 'items.source': { capture: 'replication', lsn: '0/16B3748', read: 2000 }, 'items.cache': { written: 2000 } });
 * // { 'items.source': { lsn: '0/16B3748' } }
 * ```
 */
export function visiblePositions(positions: Positions): Positions {
  let visible = memo.get(positions);
  if (visible === undefined) {
    visible = {};
    for (const [handle, position] of Object.entries(positions)) {
      const lsn = (position as { lsn?: unknown } | null)?.lsn;
      if (typeof lsn === 'string' && isLsn(lsn)) visible[handle] = { lsn };
    }
    memo.set(positions, visible);
  }
  return visible;
}

const memo = new WeakMap<Positions, Positions>();

/** A checkpoint as a reader sees it: with a row filter, its positions reduced by {@link visiblePositions}. */
export function visibleCheckpoint(
  checkpoint: PipelineCheckpoint | null,
  rowFiltered: boolean,
): PipelineCheckpoint | null {
  if (!rowFiltered || checkpoint === null) return checkpoint;
  return { ...checkpoint, positions: visiblePositions(checkpoint.positions) };
}

/** A change feed's `commit` position as a reader sees it (null stays null). */
export function visibleCommitPosition(position: Positions | null, rowFiltered: boolean): Positions | null {
  return !rowFiltered || position === null ? position : visiblePositions(position);
}
