import {
  type CacheInfo,
  type CacheSchema,
  type CheckpointPort,
  type EndpointDecision,
  type EventPublisher,
  type Logger,
  type PipelineCheckpoint,
  PipelineCheckpointSchema,
  type PipelineProgress,
  SchemaMismatchError,
  SluiceError,
  type SwitchCause,
  type WritableCache,
  type WritableCacheCatalog,
} from '@sluice/core';
import { BadRecordCollector, type BadRecordReport } from '../bad-records.js';
import { dagHash, decideRestart, type RestartPlan } from '../dag.js';
import type { ProgressTracker } from '../progress.js';
import { commitSizeOf, runPipeline } from '../run.js';
import { type CacheSink, createCacheSink, type SwitchHandover } from '../sinks/cache.js';
import { ReplicationPositionSchema } from '../sources/replication/position.js';
import type { StandingGeneration } from '../sources/replication/status.js';
import { switchHoldReason } from '../switch-gate.js';
import type { SourceBranch } from '../types.js';
import { addedFieldsListener } from './added-fields.js';
import { slotOfGeneration } from './generation-slots.js';
import {
  type EndpointRestartPlan,
  type GenerationAssessment,
  planRestart,
  RestartCase,
  restartCandidate,
} from './restart-plan.js';
import { resolveSchema } from './schema-resolution.js';
import type { EndpointShape } from './shape.js';

/** What launching a run needs: the endpoint's shape, the caches, and the pipeline's settings and callbacks. */
export interface LaunchContext {
  shape: EndpointShape;
  caches: WritableCacheCatalog;
  events: EventPublisher;
  logger: Logger;
  progress: ProgressTracker;
  /** The pipeline's own checkpoint; without it the cache's commit checkpoint is the pipeline checkpoint. */
  checkpoint?: CheckpointPort;
  /** Records sampled to infer field types. */
  sampleSize: number;
  commitEveryRecords?: number;
  commitEveryMs?: number;
  onProgress?: (progress: PipelineProgress) => void;
  /** A sink moved the alias to its generation. */
  onRedirected: () => void;
  /** A run committed `checkpoint`. */
  onCommit: (checkpoint: PipelineCheckpoint) => void;
  /** A run refused a record (counted in `progress.badRecords`, skipped). */
  onBadRecord?: (report: BadRecordReport) => void;
  /**
   * The hand-over a switch to `generation` waits for (handover.ts): the alias moves only once it caught up with the
   * serving generation. Absent for runs that never move the alias (the serving generation's follower).
   */
  handover?: (generation: string) => SwitchHandover;
}

/** A run about to start: its branch, the generation and sink it writes, and the restart decision. */
export interface Launch {
  branch: SourceBranch;
  cache: WritableCache;
  sink: CacheSink;
  schema: CacheSchema;
  /** Noted on the generation: why it is being built (null when continuing in place). */
  cause: SwitchCause | null;
  plan: RestartPlan;
  /** The serving generation, when this run feeds another: it stands still from now on (see {@link standingOf}). */
  standing: StandingGeneration | null;
}

/** A run in progress (or ended: `finished` settled). */
export interface Run {
  readonly controller: AbortController;
  readonly finished: Promise<void>;
  readonly cache: WritableCache;
  readonly sink: CacheSink;
  readonly branch: SourceBranch;
  readonly decision: EndpointDecision;
  /** Where the run started (its plan's checkpoint; null from scratch). */
  readonly checkpoint: PipelineCheckpoint | null;
  /** The serving generation while this run feeds another (a rebuild, a held green), or null. */
  readonly standing: StandingGeneration | null;
}

/** The blue/green sink of the endpoint into `cache` (the alias moves with `cause` once every source is done). */
export function endpointSink(
  lc: LaunchContext,
  cache: WritableCache,
  schema: CacheSchema,
  branch: SourceBranch,
  cause: SwitchCause = 'restart',
): CacheSink {
  const { shape, caches, logger } = lc;
  return createCacheSink({
    cause,
    holdReason: () => holdReason(lc, cache),
    handle: `${shape.name}.cache`,
    endpoint: shape.name,
    caches,
    cache,
    schema,
    sources: [branch.source.handle],
    events: lc.events,
    logger,
    onRedirected: lc.onRedirected,
    ...(lc.handover ? { handover: lc.handover(cache.name) } : {}),
    commitSize: commitSizeOf(lc.commitEveryRecords),
  });
}

/** The gates of `endpoint.switch`, asked when a green generation finished its snapshot. */
async function holdReason(lc: LaunchContext, cache: WritableCache): Promise<string | null> {
  const { caches, shape } = lc;
  const target = caches.resolveAlias(shape.name);
  const serving = target && target.cache !== cache.name ? await caches.info(target.cache) : null;
  return switchHoldReason(shape.endpoint.switch, {
    records: cache.commitState().recordCount,
    servingRecords: serving ? serving.recordCount : null,
    badRecords: lc.progress.badRecords,
  });
}

/**
 * Opens generation `name` for writing with `schema` and asks whether a run of `branch` can continue it (its
 * commit checkpoint against the pipeline's, and every source's `canResume`). The cache stays open unless the
 * schema was refused.
 */
export async function assessGeneration(
  lc: LaunchContext,
  name: string,
  schema: CacheSchema,
  branch: SourceBranch,
  /** Judge by the generation's own commit checkpoint alone (a rollback: the pipeline's is the current one's). */
  ownCheckpoint = false,
): Promise<{ cache: WritableCache | null; assessment: GenerationAssessment; plan: RestartPlan | null }> {
  // A run stopped on a source change it could not follow noted it on the generation: never continued again.
  const noted = (await lc.caches.info(name))?.notes.sourceChanged;
  if (noted) return { cache: null, assessment: { verdict: 'source-changed', reason: noted }, plan: null };
  let cache: WritableCache;
  try {
    cache = await lc.caches.openRw(name, schema);
  } catch (err) {
    if (SluiceError.hasCode(err, 'CACHE_SCHEMA_MISMATCH') || err instanceof SchemaMismatchError)
      return {
        cache: null,
        assessment: { verdict: 'schema-changed', message: (err as Error).message },
        plan: null,
      };
    // Files removed or overwritten under the alias table: a generation to replace, never a reason to stop the
    // endpoint for good.
    const unusable = unusableFilesReason(err, name);
    if (unusable !== null)
      return { cache: null, assessment: { verdict: 'unusable', reason: unusable }, plan: null };
    throw err;
  }
  try {
    const probe = endpointSink(lc, cache, schema, branch);
    const committed = cache.commitState().checkpoint;
    const plan = await decideRestart({
      dag: dagHash([branch], probe),
      branches: [branch],
      sink: probe,
      checkpoint: lc.checkpoint && !ownCheckpoint ? await loadPipelineCheckpoint(lc.checkpoint) : committed,
      sinkCheckpoint: committed,
    });
    const assessment: GenerationAssessment =
      plan.decision === 'resume' && plan.checkpoint !== null
        ? { verdict: 'resumable', checkpoint: plan.checkpoint, reason: plan.reason }
        : plan.sourceChanged
          ? { verdict: 'source-changed', reason: plan.reason }
          : { verdict: 'not-resumable', reason: plan.reason };
    return { cache, assessment, plan };
  } catch (err) {
    await cache.close().catch(() => {});
    throw err;
  }
}

/**
 * Why generation `name`, which the alias table lists, cannot be opened when `err` says its files are gone
 * (`CACHE_NOT_FOUND`) or damaged (`CACHE_DAMAGED`); null for any other failure (that one stops the launch).
 */
function unusableFilesReason(err: unknown, name: string): string | null {
  if (SluiceError.hasCode(err, 'CACHE_NOT_FOUND'))
    return `the files of ${name} are gone from the data directory; rebuilding from the source`;
  if (SluiceError.hasCode(err, 'CACHE_DAMAGED'))
    return `the files of ${name} are damaged (${(err as Error).message}); rebuilding from the source`;
  return null;
}

async function loadPipelineCheckpoint(port: CheckpointPort): Promise<PipelineCheckpoint | null> {
  const parsed = PipelineCheckpointSchema.safeParse(await port.load());
  return parsed.success ? parsed.data : null;
}

/**
 * Chooses the generation to write and how: resolves the schema, builds the source branch (and runs its
 * preflight), assesses the one candidate generation, plans ({@link planRestart}) and opens or creates what the
 * plan names. `force`: an operator's rebuild, or one forced by `sourceChange` (the message of the
 * `SOURCE_SCHEMA_CHANGED` that stopped the last run).
 */
export async function prepareLaunch(
  lc: LaunchContext,
  force: boolean,
  sourceChange: string | null = null,
): Promise<Launch> {
  const { shape, caches } = lc;
  const { schema, csvFields } = await resolveSchema(shape, caches, {
    reuse: !force,
    sampleSize: lc.sampleSize,
  });
  const aliasTarget = caches.resolveAlias(shape.name)?.cache ?? null;
  const infos = (await caches.list()).filter((info) => info.endpoint === shape.name);
  const generations = infos.map((info) => ({
    name: info.name,
    state: info.state,
    createdAt: info.createdAt,
    cause: info.notes.cause ?? null,
  }));
  const candidate = restartCandidate({ force, aliasTarget, generations });
  const slotOf = generationSlot(lc, infos, aliasTarget);
  let branch = shape.branch(csvFields, false, schema.fields, slotOf(candidate?.name ?? null));
  let opened: WritableCache | null = null;
  try {
    await branch.source.preflight?.();
    let assessment: GenerationAssessment | null = null;
    if (candidate)
      ({ cache: opened, assessment } = await assessGeneration(lc, candidate.name, schema, branch));
    const plan = planRestart({ force, sourceChange, aliasTarget, generations, assessment });
    const cache = await generationFor(lc, plan, opened, schema);
    if (cache !== opened) await opened?.close();
    opened = null;
    await retireSuperseded(lc, infos, { writing: cache.name, serving: aliasTarget });
    const slot = slotOf(cache.name);
    if (slot !== slotOf(candidate?.name ?? null)) {
      // Another generation than the one assessed, reading another slot (the one the serving generation does not).
      await branch.source.close();
      branch = shape.branch(csvFields, false, schema.fields, slot);
    }
    const standing =
      aliasTarget !== null && aliasTarget !== cache.name
        ? await standingOf(lc, aliasTarget, cache.name, branch.source.handle)
        : null;
    return {
      branch,
      cache,
      schema,
      sink: endpointSink(lc, cache, schema, branch, plan.cause ?? 'restart'),
      cause: plan.cause,
      plan: restartPlanOf(plan, cache.name),
      standing,
    };
  } catch (err) {
    await opened?.close().catch(() => {});
    await branch.source.close().catch(() => {});
    throw err;
  }
}

/**
 * Retires the endpoint's other green generations once a run is planned into `writing`: nothing feeds them any more
 * (a rebuild requested while a green was held or building starts a new one), so they can never be promoted — left
 * `building` with their hold, the alias table went on calling a superseded green "held", and the console offered
 * its Promote, which switched to the new green instead. Retired, garbage collection deletes them after its grace.
 */
async function retireSuperseded(
  lc: LaunchContext,
  infos: readonly CacheInfo[],
  keep: { writing: string; serving: string | null },
): Promise<void> {
  for (const info of infos) {
    if (info.state !== 'building' || info.name === keep.writing || info.name === keep.serving) continue;
    await lc.caches.retire(info.name);
    lc.logger.info(
      { endpoint: lc.shape.name, cache: info.name, by: keep.writing },
      'retired a green generation superseded by a new run',
    );
  }
}

/**
 * The replication slot of a generation of the endpoint (null: a generation about to be created), given what the
 * catalog holds (`infos`) and the generation that serves; undefined for a source without a slot per generation.
 */
export function generationSlot(
  lc: LaunchContext,
  infos: readonly CacheInfo[],
  serving: string | null,
): (generation: string | null) => string | undefined {
  const names = lc.shape.slotNames;
  const handle = `${lc.shape.name}.source`;
  const checkpointOf = (name: string) => infos.find((info) => info.name === name)?.checkpoint ?? null;
  const servingGeneration = serving === null ? null : { name: serving, checkpoint: checkpointOf(serving) };
  return (generation) =>
    names === null
      ? undefined
      : slotOfGeneration(
          names,
          handle,
          { name: generation ?? '', checkpoint: generation === null ? null : checkpointOf(generation) },
          servingGeneration,
        );
}

/**
 * The serving generation `serving` while a run feeds `following` instead: one slot feeds one generation, so from
 * this launch on the serving one stands at its last committed position (its checkpoint's LSN for a replication
 * source) and falls behind the source until the alias moves — what its status must say.
 */
async function standingOf(
  lc: LaunchContext,
  serving: string,
  following: string,
  handle: string,
): Promise<StandingGeneration> {
  const info = await lc.caches.info(serving).catch(() => null);
  const position = info?.checkpoint?.positions[handle];
  const parsed = ReplicationPositionSchema.safeParse(position);
  return { following, lsn: parsed.success ? parsed.data.lsn : null, since: Date.now() };
}

/** The generation the plan writes: the assessed one it continues or rebuilds, or a new one. */
async function generationFor(
  lc: LaunchContext,
  plan: EndpointRestartPlan,
  opened: WritableCache | null,
  schema: CacheSchema,
): Promise<WritableCache> {
  if (plan.case !== RestartCase.rebuildNew && opened?.name === plan.cache) return opened;
  return lc.caches.create({ endpoint: lc.shape.name, schema });
}

/** The run's restart plan (dag.ts's form): resume from the checkpoint, or from scratch into `cache`. */
function restartPlanOf(plan: EndpointRestartPlan, cache: string): RestartPlan {
  switch (plan.case) {
    case RestartCase.resumeInPlace:
    case RestartCase.resumeRebuild:
      return { decision: 'resume', reason: plan.reason, checkpoint: plan.checkpoint };
    case RestartCase.rebuildInGreen:
      return { decision: 'from-scratch', reason: plan.reason, checkpoint: null };
    case RestartCase.rebuildNew:
      return { decision: 'from-scratch', reason: `${plan.reason}; building ${cache}`, checkpoint: null };
  }
}

/** Starts a run into the launch's generation (the restart decision already made), noting the decision on it. */
export async function startRun(lc: LaunchContext, launch: Launch): Promise<Run> {
  const { shape, caches, logger, checkpoint } = lc;
  const name = shape.name;
  const decision: EndpointDecision = { decision: launch.plan.decision, reason: launch.plan.reason };
  logger.info({ endpoint: name, ...decision, cache: launch.cache.name }, 'endpoint restart decision');
  await caches
    .annotate(launch.cache.name, {
      decision,
      // Why it was built is the from-scratch run's reason; a run continuing it keeps that (decision says the rest).
      ...(decision.decision === 'from-scratch' ? { built: decision.reason } : {}),
      ...(launch.cause ? { cause: launch.cause } : {}),
    })
    .catch((err) => logger.warn({ err, endpoint: name }, 'could not note the restart decision'));
  await launch.sink.prepare(launch.plan);
  const checked = { ...launch.cache.schema.fields };
  const fieldTypes = addedFieldsListener(shape, launch.cache, checked, logger);
  const controller = new AbortController();
  const badRecords = new BadRecordCollector('skip', (report) => {
    logger.warn({ endpoint: name, ...report }, 'bad record');
    lc.onBadRecord?.(report);
  });
  const finished = runPipeline({
    name,
    dag: dagHash([launch.branch], launch.sink),
    branches: [launch.branch],
    sink: launch.sink,
    mode: 'endpoint',
    plan: launch.plan,
    badRecords,
    signal: controller.signal,
    ...(checkpoint ? { saveCheckpoint: (c: PipelineCheckpoint) => checkpoint.save(c) } : {}),
    // The cache refuses values of another type than its schema's; here they become bad records instead. The
    // generation's own fields (it may have gained some since it was created), and any it gains during the run.
    fields: checked,
    ...(fieldTypes !== undefined ? { fieldTypes } : {}),
    ...(lc.commitEveryRecords !== undefined ? { commitEveryRecords: lc.commitEveryRecords } : {}),
    ...(lc.commitEveryMs !== undefined ? { commitEveryMs: lc.commitEveryMs } : {}),
    progress: lc.progress,
    ...(lc.onProgress ? { onProgress: lc.onProgress } : {}),
    onCommit: lc.onCommit,
    logger,
  }).then(
    () => {},
    async (err: unknown) => {
      // Noted before the supervisor plans again: whichever run comes next — a retry, a restart, a rollback —
      // finds this generation cannot follow its source any more, even if the rebuild cannot start at once.
      if (SluiceError.hasCode(err, 'SOURCE_SCHEMA_CHANGED'))
        await caches
          .annotate(launch.cache.name, { sourceChanged: (err as Error).message })
          .catch((noteErr) =>
            logger.warn({ err: noteErr, endpoint: name }, 'could not note the source change'),
          );
      throw err;
    },
  );
  return {
    controller,
    finished,
    cache: launch.cache,
    sink: launch.sink,
    branch: launch.branch,
    decision,
    checkpoint: launch.plan.checkpoint,
    standing: launch.standing,
  };
}
