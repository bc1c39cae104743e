import {
  type CheckpointPort,
  type ConnectionConfig,
  type EndpointConfig,
  EndpointConfigSchema,
  type EndpointPipeline,
  type EndpointPipelineStatus,
  EndpointStoppedError,
  EndpointTimeoutError,
  type EventPublisher,
  type Logger,
  type NatsConfig,
  type PipelineCheckpoint,
  type PipelineProgress,
  parseConfigOrThrow,
  SWITCH_DEFAULTS,
  silentLogger,
  type WritableCacheCatalog,
} from '@sluice/core';
import type { ConnectionContext } from './addresses.js';
import { ServingFollower } from './endpoint/follower.js';
import { switchHandover } from './endpoint/handover.js';
import { type LaunchContext, prepareLaunch, type Run, startRun } from './endpoint/launch.js';
import { endpointShape } from './endpoint/shape.js';
import { startSlotSweeper } from './endpoint/slot-sweeper.js';
import { endpointSteering } from './endpoint/steering.js';
import { EndpointSupervisor, SupervisorPhase } from './endpoint/supervisor.js';
import { ProgressTracker } from './progress.js';
import { SEND_WAIT_ON_CLOSE_MS } from './sinks/pending-sends.js';
import type { CarriedLag } from './sources/replication/carried-lag.js';
import {
  followedReplicationStatus,
  isReplicationSource,
  replicationStatusOf,
  slotWaitView,
  streamsItsSlot,
} from './sources/replication/status.js';

export interface EndpointContext {
  caches: WritableCacheCatalog;
  events: EventPublisher;
  connections: Record<string, ConnectionConfig>;
  /** Relative source paths resolve against this directory. */
  baseDir?: string;
  logger?: Logger;
  commitEveryRecords?: number;
  commitEveryMs?: number;
  /** NATS for JetStream sources that name no connection. */
  nats?: NatsConfig;
  /**
   * Where the pipeline keeps its own checkpoint, compared with the cache's commit checkpoint on start.
   * Without it the cache's commit checkpoint is the pipeline checkpoint.
   */
  checkpoint?: CheckpointPort;
  /** Records sampled to infer field types when `fields` is not configured. Default 1000. */
  inferSample?: number;
  /** Wait before re-planning after a failed run (doubles up to 30 s). Default 1 s. */
  retryMs?: number;
  /** Read size of file sources (tests use small reads to stop mid-file). */
  fileChunkBytes?: number;
  /** Called on every progress report (after each batch and each commit). */
  onProgress?: (progress: PipelineProgress) => void;
  /** This node's id (default replication slot and publication names derive from it). Default `local`. */
  nodeId?: string;
  /** Tuning of replication sources (tests shorten the keepalive). */
  replication?: ConnectionContext['replication'];
  /**
   * How often the replication slots of generations no longer retained (garbage-collected) are looked for and
   * dropped (docs/generations.md). Default 60 s.
   */
  slotSweepMs?: number;
}

/**
 * Starts the pipeline that materializes an endpoint into a cache behind the alias `endpoint.name`.
 * On start it compares the pipeline checkpoint with the cache's commit checkpoint and asks the source
 * whether it can resume: consistent and resumable → continue in place (restart case 1); otherwise a new
 * generation (green) is built while the alias keeps pointing at the old one (blue), and the alias moves,
 * with one `AliasRedirected` event, only when every source finished its snapshot (case 4). A changed
 * schema, key or index set takes the same path. A failed run is retried after a back-off.
 *
 * The parts, one job each (src/endpoint/): `shape.ts` (the DAG the configuration defines),
 * `schema-resolution.ts` (configured, reused or sampled schema), `restart-plan.ts` (the restart case, a pure
 * function), `launch.ts` (opening what the plan names and starting a run), `supervisor.ts` (the state machine
 * that keeps one run going) and `steering.ts` (promote, rollback).
 *
 * @example
 * ```ts
 * const pipeline = await startEndpointPipeline(config.endpoints[0], { caches, events: backplane, connections: config.connections });
 * logger.info(pipeline.decision, 'endpoint pipeline started');
 * await pipeline.stop();
 * ```
 */
export async function startEndpointPipeline(
  input: EndpointConfig,
  ctx: EndpointContext,
): Promise<EndpointPipeline> {
  const endpoint = parseConfigOrThrow(EndpointConfigSchema, input);
  const logger = ctx.logger ?? silentLogger;
  const name = endpoint.name;
  const { caches } = ctx;
  const servingWaiters = new Set<() => void>();
  const wakeWaiters = () => {
    for (const wake of servingWaiters) wake();
  };
  let lastBadRecord: EndpointPipelineStatus['badRecords']['last'] = null;
  const lc: LaunchContext = {
    shape: endpointShape(endpoint, ctx),
    caches,
    events: ctx.events,
    logger,
    progress: new ProgressTracker(),
    ...(ctx.checkpoint ? { checkpoint: ctx.checkpoint } : {}),
    sampleSize: ctx.inferSample ?? 1_000,
    ...(ctx.commitEveryRecords !== undefined ? { commitEveryRecords: ctx.commitEveryRecords } : {}),
    ...(ctx.commitEveryMs !== undefined ? { commitEveryMs: ctx.commitEveryMs } : {}),
    ...(ctx.onProgress ? { onProgress: ctx.onProgress } : {}),
    onRedirected: () => {
      wakeWaiters();
      followServing();
    },
    onCommit: (checkpoint) => {
      supervisor.committed(checkpoint);
      carriedWhileDown();
    },
    onBadRecord: (report) => {
      lastBadRecord = { source: report.source, reason: report.reason, at: new Date().toISOString() };
    },
  };
  const retryMs = ctx.retryMs ?? 1_000;
  const servingCache = () => caches.resolveAlias(name)?.cache ?? null;
  // While the run feeds a generation the alias does not point at, the serving one follows its source through a
  // slot of its own (replication sources with a slot per generation; any other source feeds one generation).
  const follower = lc.shape.slotNames === null ? null : new ServingFollower({ lc, logger, retryMs });
  // The endpoint's own `switch.handoverWaitMs` (docs/generations.md § The switch hands over at a position).
  const handoverWaitMs = endpoint.switch?.handoverWaitMs ?? SWITCH_DEFAULTS.handoverWaitMs;
  lc.handover = switchHandover({
    endpoint: name,
    sourceHandle: `${name}.source`,
    caches,
    follower,
    logger,
    pauseMs: handoverWaitMs,
  });
  const sweeper = startSlotSweeper({ shape: lc.shape, caches, logger, everyMs: ctx.slotSweepMs ?? 60_000 });
  /** What the follower follows now: the serving generation while the run feeds another one, else nothing. */
  const followServing = (): void => {
    if (follower === null) return;
    const run = supervisor.run;
    const serving = caches.resolveAlias(name)?.cache ?? null;
    const wanted = run && !run.sink.redirected && serving !== run.cache.name ? serving : null;
    void follower
      .follow(wanted)
      .then(() => (wanted === null ? sweeper.sweep() : undefined))
      .catch((err: unknown) => logger.error({ endpoint: name, err }, 'cannot follow the serving generation'));
  };
  /**
   * The lag of the serving generation while the run feeding it does not stream (it failed and is retried, or waits for
   * its slot): what its last read measured, carried on (carried-lag.ts), so an outage shows the lag growing — or,
   * PostgreSQL down, the last figures and their age — rather than nothing. Dropped once a run streams it again.
   */
  let carried: { generation: string; lag: CarriedLag } | null = null;
  const carryFrom = (run: Run): void => {
    const source = run.branch.source;
    if (!isReplicationSource(source)) return;
    if (!run.sink.redirected && run.cache.name !== servingCache()) return;
    // A read that never streamed (it waited for its slot in vain) leaves what an earlier one measured in place.
    const lag = source.carryLag();
    if (lag === null) return;
    carried?.lag.stop();
    carried = { generation: run.cache.name, lag };
  };
  /** The carried lag while it still stands for the serving generation's (no run streams it); dropped otherwise. */
  const carriedWhileDown = (): CarriedLag | null => {
    if (carried === null) return null;
    const source = supervisor.run?.branch.source;
    const streams = source !== undefined && isReplicationSource(source) && source.streaming();
    const stillServing =
      supervisor.fed?.cache.name === carried.generation && servingCache() === carried.generation;
    if (!streams && stillServing && supervisor.phase !== SupervisorPhase.stopped) return carried.lag;
    carried.lag.stop();
    carried = null;
    return null;
  };
  const supervisor: EndpointSupervisor = new EndpointSupervisor({
    endpoint: name,
    logger,
    prepare: (force, sourceChange) => prepareLaunch(lc, force, sourceChange ?? null),
    start: async (launch) => {
      // A run of the generation the follower follows takes it over (one reader per slot).
      if (follower?.generation === launch.cache.name) await follower.follow(null);
      return startRun(lc, launch);
    },
    retryMs,
    onStopped: wakeWaiters,
    onAdopted: followServing,
    onFailed: carryFrom,
  });
  const steering = endpointSteering(lc, supervisor, () => {
    wakeWaiters();
    followServing();
  });
  const stop = async () => {
    await supervisor.stop();
    carriedWhileDown();
    await follower?.stop();
    await sweeper.stop();
    // Bounded, as a cache sink's close: a stop does not wait for a hung NATS (the backplane keeps what it was given).
    const left = await steering.settleSends(SEND_WAIT_ON_CLOSE_MS);
    if (left > 0) logger.info({ endpoint: name, left }, 'stopping with a rollback still being announced');
  };

  try {
    await supervisor.launch(false);
  } catch (err) {
    await stop();
    throw err;
  }
  void sweeper.sweep();

  /** Operator actions (rebuild, promote, rollback) run one at a time. */
  let steeringQueue: Promise<unknown> = Promise.resolve();
  const exclusive = <T>(action: () => Promise<T>): Promise<T> => {
    const next = steeringQueue.then(action, action);
    steeringQueue = next.catch(() => {});
    return next;
  };

  const replicationStatus = (): EndpointPipelineStatus['replication'] => {
    const down = carriedWhileDown();
    if (down !== null) return down.status();
    const source = supervisor.branch?.source;
    if (!source) return null;
    const run = supervisor.run;
    if (!run || run.sink.redirected) return replicationStatusOf(source);
    // The run feeds a generation the alias does not point at yet: what readers get is the serving one, which
    // follows through its own slot, or else stands where it last committed.
    const serving = servingCache();
    const followed = serving === null ? null : (follower?.sourceFollowing(serving) ?? null);
    if (followed !== null) return followedReplicationStatus(followed, source, run.cache.name);
    const standing =
      (serving === null ? null : follower?.standingOf(serving, run.cache.name)) ?? run.standing;
    return replicationStatusOf(source, standing);
  };

  /** The wait of the run's read for its replication slot, which another process streams; null when none waits. */
  const slotWait = (): EndpointPipelineStatus['slotWait'] => slotWaitView(supervisor.branch?.source);
  /**
   * Whether the run's read has its replication slot: PostgreSQL accepted its `START_REPLICATION`. A resumed run's
   * progress says `streaming` as soon as its snapshot is done — before its read even asked for the slot, which another
   * process may stream — so that alone never says it streams. True for a source without a slot.
   */
  const runStreams = (): boolean => streamsItsSlot(supervisor.run?.branch.source);

  return {
    get decision() {
      return supervisor.decision;
    },
    status() {
      const serving = servingCache();
      // The generation fed besides the serving one (a green building or held) — also while the run that fed it
      // failed and is retried: the generation, and its hold, outlive the run (supervisor.fed).
      const fed = supervisor.fed;
      const building = fed && !fed.sink.redirected && fed.cache.name !== serving ? fed : null;
      const reported = lc.progress.snapshot();
      const waiting = slotWait();
      // Not streaming yet: it waits for its slot, or has not been let stream it yet (a moment, unless another
      // process holds it). Shown as starting — and, after failed attempts, as the retry's attempt under way.
      const notYet = reported.phase === 'streaming' && !runStreams();
      const progress = notYet ? { ...reported, phase: 'starting' as const } : reported;
      return {
        endpoint: name,
        alias: name,
        servingCache: serving,
        buildingCache: building?.cache.name ?? null,
        checkpoint: supervisor.checkpoint,
        progress,
        held:
          building && building.sink.held !== null
            ? { cache: building.cache.name, reason: building.sink.held }
            : null,
        // A run that waits for its slot (or has not been let stream it yet) after failed attempts has not recovered
        // (retry-backoff.ts): it is the retry's attempt under way, shown as such with the failure it retries after —
        // not as a run that streams.
        ...retryShown(supervisor, waiting !== null || notYet),
        slotWait: waiting,
        // A run from scratch counts from 0 again: a reason from before it no longer applies.
        // Before this process saw one, the last reason is the one the checkpoint kept (run.ts), so the evidence
        // survives a restart.
        badRecords: {
          count: progress.badRecords,
          last:
            progress.badRecords > 0
              ? (lastBadRecord ?? checkpointLastBad(supervisor.checkpoint, `${name}.cache`))
              : null,
        },
        replication: replicationStatus(),
        follower: follower?.status() ?? null,
      };
    },
    rebuild: () =>
      exclusive(async () => {
        await supervisor.halt();
        await supervisor.launch(true);
      }),
    promote: (generation?: string) => exclusive(() => steering.promote(generation)),
    rollback: (to?: string, from?: string) => exclusive(() => steering.rollback(to, from)),
    stop,
    async whenServing(options = {}) {
      const timeoutMs = options.timeoutMs ?? 60_000;
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const run = supervisor.run;
        if (run?.sink.redirected) return run.cache.name;
        if (supervisor.phase === SupervisorPhase.stopped) throw new EndpointStoppedError(name);
        const remaining = deadline - Date.now();
        if (remaining <= 0) throw new EndpointTimeoutError(name, timeoutMs);
        await new Promise<void>((resolve) => {
          const wake = () => {
            servingWaiters.delete(wake);
            clearTimeout(timer);
            resolve();
          };
          const timer = setTimeout(wake, Math.min(remaining, 200));
          servingWaiters.add(wake);
        });
      }
    },
    [Symbol.asyncDispose]: stop,
  };
}

/**
 * The failure and the retry the status shows: the supervisor's while it retries; while the run does not stream its
 * slot yet (`beforeStreaming`: it waits for it, or was not let stream it yet) after failed attempts it has not
 * recovered from, the last of them and the attempts so far, the attempt under way.
 */
function retryShown(
  supervisor: EndpointSupervisor,
  beforeStreaming: boolean,
): Pick<EndpointPipelineStatus, 'error' | 'retry'> {
  const unrecovered = !beforeStreaming || supervisor.retry !== null ? null : supervisor.unrecovered;
  if (unrecovered === null) return { error: supervisor.error, retry: retryStatus(supervisor.retry) };
  return { error: unrecovered.error, retry: { attempts: unrecovered.attempts, nextAttemptAt: null } };
}

/** The supervisor's retry as the status shows it (the next attempt's time in ISO 8601). */
function retryStatus(
  retry: { attempts: number; nextAttemptAt: number | null } | null,
): EndpointPipelineStatus['retry'] {
  if (retry === null) return null;
  const { attempts, nextAttemptAt } = retry;
  return { attempts, nextAttemptAt: nextAttemptAt === null ? null : new Date(nextAttemptAt).toISOString() };
}

/** The last bad record a checkpoint keeps in the cache sink's position (run.ts), or null. */
function checkpointLastBad(
  checkpoint: PipelineCheckpoint | null,
  sinkHandle: string,
): EndpointPipelineStatus['badRecords']['last'] {
  const position = checkpoint?.positions[sinkHandle] as { lastBad?: unknown } | undefined;
  const last = position?.lastBad as { source?: unknown; reason?: unknown; at?: unknown } | undefined;
  if (typeof last?.source !== 'string' || typeof last.reason !== 'string' || typeof last.at !== 'string')
    return null;
  return { source: last.source, reason: last.reason, at: last.at };
}
