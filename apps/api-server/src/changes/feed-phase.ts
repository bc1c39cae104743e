import type { ChangeHead } from '@sluice/core';

// The states of one change-feed subscription and the rules between them (the subscriber in subscriber.ts moves
// through them; the wire protocol is docs/http-api.md, "Change feeds", and docs/architecture.md, Protocol 2).

/** Phases of one subscription (one `phase`, explicit transitions). */
export const FeedPhase = {
  starting: 'starting',
  snapshot: 'snapshot',
  catchup: 'catchup',
  live: 'live',
  switching: 'switching',
  closed: 'closed',
} as const;
export type FeedPhase = (typeof FeedPhase)[keyof typeof FeedPhase];

/**
 * The phases each phase may move to. `closed` is final: a step that awaited something (opening a generation,
 * a drain) and finds the connection closed must not start a snapshot or go live again — that would take a
 * lease and a follower slot nobody releases.
 */
export const FEED_NEXT: Record<FeedPhase, readonly FeedPhase[]> = {
  starting: [FeedPhase.snapshot, FeedPhase.catchup, FeedPhase.live, FeedPhase.switching, FeedPhase.closed],
  snapshot: [FeedPhase.catchup, FeedPhase.live, FeedPhase.switching, FeedPhase.closed],
  catchup: [FeedPhase.catchup, FeedPhase.live, FeedPhase.switching, FeedPhase.snapshot, FeedPhase.closed],
  live: [FeedPhase.catchup, FeedPhase.live, FeedPhase.switching, FeedPhase.snapshot, FeedPhase.closed],
  switching: [FeedPhase.snapshot, FeedPhase.catchup, FeedPhase.live, FeedPhase.switching, FeedPhase.closed],
  closed: [],
};

/** Why a subscriber starts over from a snapshot. */
export const ResetReason = {
  retention: 'retention',
  generationGone: 'generation-gone',
  unknownPosition: 'unknown-position',
  /** The token was issued under another `filter=` or row filter (feed-filter.ts `FeedFilter.view`). */
  filterChanged: 'filter-changed',
} as const;
export type ResetReason = (typeof ResetReason)[keyof typeof ResetReason];

/**
 * Why a token's position (its last `seq`) cannot be continued from a log whose entries are `head.first` to
 * `head.last`, or `null` when the next entry is there: a `seq` beyond the log was never written here, one before
 * it has been trimmed away.
 */
export function positionProblem(seq: number, head: ChangeHead): ResetReason | null {
  if (seq > head.last) return ResetReason.unknownPosition;
  if (seq < head.first - 1) return ResetReason.retention;
  return null;
}
