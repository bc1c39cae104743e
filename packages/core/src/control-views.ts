/**
 * What the control API (app-server) answers about endpoints, their generations and the cluster's members: one
 * definition, used by the app-server that builds these views and by `@sluice/client` (and the console) that reads
 * them. Types only: the app-server builds them from its pipelines and caches, never from untrusted input.
 */
import type { PipelineCheckpoint } from './checkpoint.js';
import type { TransferFailure, TransferRequest, TransferResult, TransferState } from './transfer.js';

/** How far a generation being built is: its committed records against the serving generation's. */
export interface BuildProgress {
  cache: string;
  records: number;
  /** Records of the serving generation (what a rebuild is expected to reach), or null. */
  expected: number | null;
  /** records / expected, capped at 1; null when there is nothing to compare with. */
  ratio: number | null;
}

/**
 * A logical replication source's slot, committed LSN and lag (bytes of WAL, seconds) — of what is served: while the
 * slot feeds a generation that does not serve yet (a rebuild, a held green), the serving one stands still at its last
 * commit and falls behind, and `following` tells how far the fed one is.
 */
export interface ReplicationStatus {
  slot: string;
  committedLsn: string | null;
  lagBytes: number | null;
  lagSeconds: number | null;
  /**
   * Null while a run streams the slot (the figures are live). While the endpoint retries (its run failed, or waits for
   * a slot another process reads): when PostgreSQL's WAL position behind `lagBytes` was last read (ISO 8601) — moments
   * ago while PostgreSQL answers (the lag keeps growing as WAL is written), the last time it answered while it is down
   * (the figures are the last known; `lagSeconds` still counts on). Null in a transfer's progress too.
   */
  observedAt?: string | null;
  /** The generation the slot feeds when it is not the serving one (building or held), or null. */
  following?: {
    cache: string;
    committedLsn: string | null;
    lagBytes: number | null;
    lagSeconds: number | null;
  } | null;
}

/**
 * Where the follower of an endpoint's serving generation is (docs/generations.md) while the endpoint's run feeds
 * another generation (a green building or held):
 * - `starting`: assessing the serving generation and starting its run;
 * - `following`: it continues the serving generation from its own checkpoint, through its own replication slot;
 * - `retrying`: its run failed (`error`); it starts again after a back-off;
 * - `standing`: it cannot continue the serving generation (`reason`): readers get it at its last commit until the
 *   alias moves;
 * - `paused`: a switch hands the alias over (`reason`): the serving generation commits nothing more while the
 *   generation switched to catches up with its last position (docs/generations.md § The switch hands over at a
 *   position); it follows again if the switch does not happen within the hand-over wait.
 */
export const ServingFollowerPhase = {
  starting: 'starting',
  following: 'following',
  retrying: 'retrying',
  standing: 'standing',
  paused: 'paused',
} as const;
export type ServingFollowerPhase = (typeof ServingFollowerPhase)[keyof typeof ServingFollowerPhase];

/**
 * The serving generation's follower as `GET /v1/endpoints` reports it (`follower`; null while the run feeds the
 * serving generation itself, or for a source that cannot follow two generations at once).
 */
export interface ServingFollowerStatus {
  /** The serving generation it follows (or tries to, or stands for). */
  cache: string;
  phase: ServingFollowerPhase;
  /** Why it stands (`standing`), why its last run failed (`retrying`) or which switch it waits for (`paused`). */
  reason: string | null;
  /** The failure it retries after (`retrying`), with its stable code; null otherwise. */
  error: { code: string; message: string } | null;
  /** Records written into the serving generation, as its runs count them (a resumed run counts on from its checkpoint). */
  recordsWritten: number;
  /** The LSN of its last commit into the serving generation and when (ISO 8601); null before its first. */
  lastCommit: { lsn: string; at: string } | null;
  /**
   * From a failed run (or start) until it follows again: the failed attempts in a row and when it tries again (null
   * while that attempt is under way); null otherwise. The same shape as the endpoint's `retry`.
   */
  retry: RetryView | null;
  /**
   * While its run waits for the replication slot another process streams (the same shape as the endpoint's
   * `slotWait`): nothing is followed meanwhile, so `phase` is then `retrying` (the attempt under way after failed
   * ones) or `starting`, never `following`. Null otherwise.
   */
  slotWait: SlotWaitView | null;
}

/**
 * Records an endpoint's pipeline refused and skipped (a value of another type than the schema's, a missing key, an
 * unreadable record): how many in the current generation's run (kept across resumes by its checkpoint), and the
 * latest one this process saw — where it was read, why, and when — or null (none since the process started).
 */
export interface BadRecordsView {
  count: number;
  last: { source: string; reason: string; at: string } | null;
}

/**
 * Where an endpoint is, as `GET /v1/endpoints` reports it — one phase, which says whether an operator has anything to do:
 * - `starting`: its pipeline is starting;
 * - `snapshotting`: it reads its source's snapshot (into the serving generation, or a green being built);
 * - `streaming`: it follows its source;
 * - `completed`: its source ended (a file that is not followed): it serves what was built;
 * - `held`: a finished green waits for promote (a switch gate, or `switch.mode: manual`);
 * - `retrying`: a start or a run failed (`error`) for a reason that may pass — the source unreachable, PostgreSQL
 *   restarting — and Sluice tries again by itself (`retry`): an outage it waits out, nothing for an operator to fix;
 * - `failed`: its pipeline could not start for a reason that will not pass by itself (`error`: a misconfigured
 *   source, `REPLICA_IDENTITY_MISSING`, …): fix the cause, then Rebuild;
 * - `stopped`: the node is stopping.
 */
export const EndpointPhase = {
  starting: 'starting',
  snapshotting: 'snapshotting',
  streaming: 'streaming',
  completed: 'completed',
  held: 'held',
  retrying: 'retrying',
  failed: 'failed',
  stopped: 'stopped',
} as const;
export type EndpointPhase = (typeof EndpointPhase)[keyof typeof EndpointPhase];

/**
 * Something Sluice retries by itself — an endpoint (`phase: retrying`: its start or its run) or the serving
 * generation's follower (`phase: retrying`, and `starting` while the attempt it waited for is under way): how many
 * attempts failed in a row, and when the next one is due (ISO 8601; null while an attempt is under way). The failure
 * itself is the `error` beside it.
 *
 * @example
 * ```ts
 * const retry: RetryView = { attempts: 3, nextAttemptAt: '2026-12-06T18:45:06.871Z' };
 * ```
 */
export interface RetryView {
  attempts: number;
  nextAttemptAt: string | null;
}

/**
 * The endpoint's run waits for its replication slot, which another process streams (a walsender not released yet,
 * another reader such as `pg_recvlogical`): nothing streams meanwhile. Past `until` the wait fails — retryably — and
 * the run is retried (`phase: retrying`); a wait after earlier failed attempts is itself the attempt under way of
 * that retry (`phase: retrying`, `retry.nextAttemptAt` null), a first one the endpoint's start (`phase: starting`).
 *
 * @example
 * ```ts
 * const wait: SlotWaitView = { slot: 'sluice_h1_items_source', since: '2026-12-06T18:45:00.000Z',
 *   until: '2026-12-06T18:45:15.000Z', activePid: 4242 };
 * ```
 */
export interface SlotWaitView {
  /** The slot waited for. */
  slot: string;
  /** When this wait began (ISO 8601). */
  since: string;
  /** When it gives up and fails, to be retried (ISO 8601): `since` + the source's slot wait (15 s). */
  until: string;
  /** The PostgreSQL backend (walsender) streaming the slot, as last seen (`pg_replication_slots.active_pid`). */
  activePid: number | null;
}

/**
 * What an endpoint's `lag` counts, which depends on its source: a file source's is the `bytes` of the file not yet
 * read (its size less the offset read to), a JetStream source's the `messages` of the stream not yet read (its last
 * sequence less the one read to). A PostgreSQL source reports no `lag` — a logical-replication one reports its lag
 * (bytes of WAL, seconds) in `replication` instead.
 *
 * @example
 * ```ts
 * const label = status.lag === null ? '—' : `${status.lag} ${status.lagUnit ?? ''}`;
 * ```
 */
export const LagUnit = { bytes: 'bytes', messages: 'messages' } as const;
export type LagUnit = (typeof LagUnit)[keyof typeof LagUnit];

/** One endpoint as `GET /v1/endpoints` reports it. */
export interface EndpointStatus {
  name: string;
  alias: string;
  servingCache: string | null;
  buildingCache: string | null;
  checkpoint: PipelineCheckpoint | null;
  /** Where the endpoint is ({@link EndpointPhase}): `retrying` recovers by itself, `failed` waits for an operator. */
  phase: EndpointPhase;
  records: number | null;
  /** How far the run is behind its source, in {@link EndpointStatus.lagUnit}; null when the source cannot tell. */
  lag: number | null;
  /** What `lag` counts for this endpoint's source ({@link LagUnit}); null for a source that reports no `lag`. */
  lagUnit: LagUnit | null;
  rate: number;
  decision: { decision: string; reason: string } | null;
  /** The generation held by a switch gate (or manual mode), and why. */
  held: { cache: string; reason: string } | null;
  /** The generation being built (not yet finished or held), with its progress. */
  building: BuildProgress | null;
  /** Why it is `retrying` or `failed` (the last failure, with its stable code); null otherwise. */
  error: { code: string; message: string } | null;
  /** While `retrying`: the failed attempts in a row and when the next one is due; null otherwise. */
  retry: RetryView | null;
  /** While its run waits for its replication slot, which another process streams ({@link SlotWaitView}); else null. */
  slotWait: SlotWaitView | null;
  /** Records refused and skipped while the endpoint keeps streaming: updates an operator should know are dropped. */
  badRecords: BadRecordsView;
  /** Set for endpoints fed by PostgreSQL logical replication. */
  replication: ReplicationStatus | null;
  /**
   * The serving generation's follower while the run feeds another generation (a green building or held), so an
   * operator sees a serving generation that stands or retries; null when nothing follows it.
   */
  follower: ServingFollowerStatus | null;
}

/** The generation states an operator sees. */
export const GenerationState = {
  serving: 'serving',
  building: 'building',
  held: 'held',
  retired: 'retired',
} as const;
export type GenerationState = (typeof GenerationState)[keyof typeof GenerationState];

/** One retained generation as `GET /v1/endpoints/:name/generations` reports it. */
export interface GenerationView {
  name: string;
  state: GenerationState;
  createdAt: string;
  snapshotDoneAt: string | null;
  switchedAt: string | null;
  retiredAt: string | null;
  records: number;
  checkpoint: unknown;
  /** The restart decision of the latest run into it (`resume` | `from-scratch`). */
  decision: string | null;
  /** Why it is held, else why the decision was made. */
  reason: string | null;
  /** Why it was built (the cause its switch records). */
  cause: string | null;
}

/** One switch of an alias, as the alias table keeps it. */
export interface SwitchView {
  alias: string;
  from: string | null;
  to: string;
  at: string;
  cause: string;
  version: number;
}

/** `GET /v1/endpoints/:name/generations`: retained generations and the alias history, both newest first. */
export interface GenerationsView {
  endpoint: string;
  generations: GenerationView[];
  history: SwitchView[];
}

/** What a promote or rollback did (`changed: false`: it had been done already). */
export interface SwitchOutcome {
  endpoint: string;
  from: string | null;
  to: string;
  cause: 'promote' | 'rollback';
  changed: boolean;
}

/** One member of the cluster as `GET /v1/nodes` reports it (`alive`: seen within `leaseMs`, store clock). */
export interface NodeView {
  nodeId: string;
  address: string;
  instanceId: string;
  startedAt: string;
  lastSeenAt: string;
  alive: boolean;
}

/** One endpoint as `GET /v1/endpoints/stream` pushes it: its status, generations and alias history. */
export interface EndpointWatchView extends EndpointStatus {
  generations: GenerationView[];
  history: SwitchView[];
}

/**
 * The events of `GET /v1/endpoints/stream` (Server-Sent Events): the whole picture of the host's endpoints on
 * connect and whenever any of it changes, and each alias switch of this host as it happens.
 */
export type EndpointStreamEvent =
  | { type: 'endpoints'; endpoints: EndpointWatchView[] }
  | {
      type: 'switch';
      endpoint: string;
      from: string | null;
      to: string;
      cause: string | null;
      version: number | null;
      at: string;
    };

/** How far a running transfer is, as the node that runs it counts (since its latest start). */
export interface TransferProgressView {
  /** `snapshotting`, then `streaming` once a following transfer (`options.follow`) applies changes. */
  phase: string;
  recordsRead: number;
  recordsWritten: number;
  /** Records per second over the recent window. */
  rate: number;
  /** A transfer reading logical replication: its slot, the LSN the destination committed, and the lag. */
  replication?: ReplicationStatus | null;
}

/** A transfer record as the control API returns it (dates as ISO strings, no checkpoint). */
export interface TransferView {
  id: string;
  mode: string;
  state: TransferState;
  owner: { nodeId: string; address: string | null } | null;
  epoch: number;
  attempts: number;
  /** Retryable failures since the transfer last saved progress (see `TransferRecord.retries`). */
  retries: number;
  leaseExpiresAt: string | null;
  /**
   * True while the current owner has passed its fenced finishing step (`TransferRecord.finishingEpoch` is this
   * `epoch`) and the record is not final yet: it is publishing, and the record is held against a takeover or
   * terminate on a "nobody" until its lease expired. False otherwise (also once a successor took over).
   */
  finishing: boolean;
  error: TransferFailure | null;
  result: TransferResult | null;
  /**
   * The run's progress when the answering node is the one running it (`IN_PROGRESS` there); `null` otherwise
   * (ask `owner.address` for a transfer another node runs).
   */
  progress: TransferProgressView | null;
  createdAt: string;
  updatedAt: string;
  request: TransferRequest;
}
