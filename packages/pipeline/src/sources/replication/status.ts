/**
 * What the rest of the pipeline (and operators) can ask of a replication source beyond {@link PipelineSource}:
 * its slot, its committed LSN and its lag.
 */
import type { ReplicationStatus, SlotWaitView } from '@sluice/core';
import type { PipelineSource } from '../../types.js';
import type { CarriedLag } from './carried-lag.js';
import type { ReplicationLag } from './lag.js';

/**
 * A read of the source waiting for its slot, which another process streams (a walsender not yet released, another
 * reader): since when (ms since the epoch), when it gives up and fails — retryably — after `slotWaitMs`, and the
 * PostgreSQL backend streaming the slot as last seen.
 */
export interface SlotWait {
  slot: string;
  since: number;
  until: number;
  activePid: number | null;
}

/** A replication source: a {@link PipelineSource} that can also say how far it lags. */
export interface ReplicationSource extends PipelineSource {
  /** The replication slot it reads. */
  readonly slot: string;
  /** Lag of what the cache committed behind PostgreSQL's current WAL position (null before streaming). */
  replicationLag(): ReplicationLag | null;
  /** The LSN the cache has committed (the freshness position), or null before the first commit. */
  committedLsn(): string | null;
  /** How far `lsn`, which stopped advancing at `since` (ms), is behind PostgreSQL's WAL now. */
  lagBehind(lsn: string, since: number): ReplicationLag;
  /**
   * True while a read streams the slot (PostgreSQL accepted its `START_REPLICATION`; its lag is live); false before —
   * while it waits for the slot, and until PostgreSQL let it have it — and after.
   */
  streaming(): boolean;
  /** While a read waits for its slot, which another process streams: since when, until when, and who; else null. */
  slotWait(): SlotWait | null;
  /**
   * The lag its last read measured, carried on past the end of that read (carried-lag.ts): what an endpoint shows
   * while it retries. Null when no read of this source measured any (it never streamed). Works after `close`.
   */
  carryLag(): CarriedLag | null;
}

/** The serving generation while the slot feeds another: where it stopped, and since when. */
export interface StandingGeneration {
  /** The generation the slot feeds instead. */
  following: string;
  /** The serving generation's committed LSN, or null when it has none (it then reports no lag). */
  lsn: string | null;
  /** When it last committed (ms since the epoch). */
  since: number;
}

/**
 * True for a source made by `createReplicationSource`.
 *
 * @example
 * ```ts
 * if (isReplicationSource(source)) logger.info({ slot: source.slot }, 'replicating');
 * ```
 */
export function isReplicationSource(source: PipelineSource): source is ReplicationSource {
  return typeof (source as Partial<ReplicationSource>).replicationLag === 'function';
}

/**
 * Whether a run's read of `source` streams what it reads: a replication source once PostgreSQL let it stream its
 * slot ({@link ReplicationSource.streaming}); true for none, or a source without a slot. The endpoint's status and its
 * serving follower's say "streaming" / "following" only then.
 *
 * @example
 * ```ts
 * const phase = streamsItsSlot(run?.branch.source) ? 'streaming' : 'starting';
 * ```
 */
export function streamsItsSlot(source: PipelineSource | undefined): boolean {
  return source === undefined || !isReplicationSource(source) || source.streaming();
}

/**
 * The wait of `source`'s read for its replication slot, which another process streams, as the status shows it (times
 * in ISO 8601); null when `source` is none, is no replication source, or does not wait. The endpoint's `slotWait` and
 * its serving follower's.
 *
 * @example
 * ```ts
 * const slotWait = slotWaitView(run?.branch.source); // { slot, since, until, activePid } | null
 * ```
 */
export function slotWaitView(source: PipelineSource | undefined): SlotWaitView | null {
  const wait = source !== undefined && isReplicationSource(source) ? source.slotWait() : null;
  if (wait === null) return null;
  const iso = (ms: number) => new Date(ms).toISOString();
  return { slot: wait.slot, since: iso(wait.since), until: iso(wait.until), activePid: wait.activePid };
}

/**
 * What operators see of a replication source (its slot, committed LSN, lag in bytes and seconds), or null for any
 * other source: `GET /v1/endpoints` and a running transfer's progress report it.
 *
 * @example
 * ```ts
 * replicationStatusOf(source); // { slot: 'sluice_x_…', committedLsn: '0/1A2B3C', lagBytes: 0, lagSeconds: 0 }
 * ```
 */
export function replicationStatusOf(
  source: PipelineSource,
  standing: StandingGeneration | null = null,
): ReplicationStatus | null {
  if (!isReplicationSource(source)) return null;
  const lag = source.replicationLag();
  const fed = {
    committedLsn: source.committedLsn(),
    lagBytes: lag?.bytes ?? null,
    lagSeconds: lag?.seconds ?? null,
  };
  if (standing === null) return { slot: source.slot, ...fed, observedAt: null, following: null };
  // What readers get is the serving generation, standing where it last committed.
  const behind = standing.lsn === null ? null : source.lagBehind(standing.lsn, standing.since);
  return {
    slot: source.slot,
    committedLsn: standing.lsn,
    lagBytes: behind?.bytes ?? null,
    lagSeconds: behind?.seconds ?? null,
    observedAt: null,
    following: { cache: standing.following, ...fed },
  };
}

/**
 * What operators see while two generations follow the source at once, each through its own slot: the serving
 * generation's figures (what readers get) and, in `following`, those of the generation being fed (building or
 * held). Null unless both are replication sources.
 *
 * @example
 * ```ts
 * followedReplicationStatus(servingSource, greenSource, 'items-01…'); // { slot, committedLsn, …, following: { cache, … } }
 * ```
 */
export function followedReplicationStatus(
  serving: PipelineSource,
  fed: PipelineSource,
  fedCache: string,
): ReplicationStatus | null {
  if (!isReplicationSource(serving) || !isReplicationSource(fed)) return null;
  const figures = (source: ReplicationSource) => {
    const lag = source.replicationLag();
    return {
      committedLsn: source.committedLsn(),
      lagBytes: lag?.bytes ?? null,
      lagSeconds: lag?.seconds ?? null,
    };
  };
  return {
    slot: serving.slot,
    ...figures(serving),
    observedAt: null,
    following: { cache: fedCache, ...figures(fed) },
  };
}
