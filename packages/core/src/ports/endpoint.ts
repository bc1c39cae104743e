/**
 * The endpoint pipeline port: what the app-server steers and reports of the pipeline that materializes one
 * endpoint into its cache generations. `@sluice/pipeline`'s `startEndpointPipeline` returns one.
 */
import type { PipelineCheckpoint, PipelineProgress, RestartDecision } from '../checkpoint.js';
import type {
  BadRecordsView,
  ReplicationStatus,
  RetryView,
  ServingFollowerStatus,
  SlotWaitView,
  SwitchOutcome,
} from '../control-views.js';

/** The restart decision of a pipeline's latest start (or rebuild), and why. */
export interface EndpointDecision {
  decision: RestartDecision;
  reason: string;
}

/**
 * What an endpoint pipeline reports about itself (the app-server turns it into the control API's `EndpointStatus`).
 */
export interface EndpointPipelineStatus {
  endpoint: string;
  alias: string;
  servingCache: string | null;
  buildingCache: string | null;
  checkpoint: PipelineCheckpoint | null;
  progress: PipelineProgress;
  /** The generation being built finished its snapshot and is held by a switch gate (or manual mode): why. */
  held: { cache: string; reason: string } | null;
  /** The last failure of the pipeline, when it is waiting to retry (or its run waits for its slot after one). */
  error: { code: string; message: string } | null;
  /**
   * While a failed run is being retried (from the failure until a run starts again — or, a run that waits for its
   * replication slot after failed attempts, until it streams): the failed attempts in a row and when the next is due
   * (null while it is under way). Null while a run goes on.
   */
  retry: RetryView | null;
  /**
   * While the run waits for its replication slot, which another process streams: which slot, since when, until when,
   * and who streams it. Null otherwise (and for other sources).
   */
  slotWait: SlotWaitView | null;
  /** Records refused (skipped) by the current run: their count (`progress.badRecords`) and the latest one. */
  badRecords: BadRecordsView;
  /** For a source read by logical replication: its slot and lag. Else null. */
  replication: ReplicationStatus | null;
  /** The serving generation's follower while the run feeds another generation (docs/generations.md), else null. */
  follower: ServingFollowerStatus | null;
}

/**
 * A running endpoint pipeline: its status, the operator's steering (rebuild, promote, rollback) and stop.
 *
 * @example
 * ```ts
 * await using pipeline = await startEndpointPipeline(endpoint, { caches, events, connections });
 * await pipeline.whenServing({ timeoutMs: 30_000 });
 * const { servingCache, progress } = pipeline.status();
 * ```
 */
export interface EndpointPipeline extends AsyncDisposable {
  /** The restart decision of the latest start (or rebuild) and its reason. */
  readonly decision: EndpointDecision;
  status(): EndpointPipelineStatus;
  /** Forces a blue/green rebuild: a new generation is built while the current one keeps serving. */
  rebuild(): Promise<void>;
  /**
   * Switches the alias to the held generation (`AliasRedirected`, cause `promote`); it keeps following its source.
   * Nothing held: the last promote again (`changed: false`) or `NOTHING_TO_PROMOTE`. With `generation` (the one the
   * operator saw held), only that one: another held since, or none, is `GENERATION_NOT_HELD` and nothing moves.
   */
  promote(generation?: string): Promise<SwitchOutcome>;
  /**
   * Points the alias back at the generation that served before the current one (or at `to`, a retained generation
   * that served before) and continues it from its own checkpoint; a generation being built or held is abandoned.
   * Refused with `CANNOT_RESUME` (nothing changes) when its source cannot continue from there; `NOTHING_TO_ROLL_BACK`
   * when no such generation is retained. Repeating the last rollback answers `changed: false`. With `from` (the
   * generation the operator saw serving), only from that one: another serving now is `GENERATION_NOT_SERVING` and
   * nothing moves — a page behind the server never rolls back from a generation it did not show.
   */
  rollback(to?: string, from?: string): Promise<SwitchOutcome>;
  stop(): Promise<void>;
  /**
   * Resolves with the cache's name once the alias points at a generation whose every source finished its
   * snapshot; `ENDPOINT_STOPPED` when the pipeline stops first, `ENDPOINT_TIMEOUT` when `timeoutMs` passes.
   */
  whenServing(options?: { timeoutMs?: number }): Promise<string>;
}
