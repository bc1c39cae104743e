import { setTimeout as delay } from 'node:timers/promises';
import {
  type CacheSchema,
  CannotResumeError,
  type CheckpointPort,
  type ConnectionConfig,
  type EndpointConfig,
  EndpointConfigSchema,
  type EndpointPipeline,
  type EndpointPipelineStatus,
  type EventPublisher,
  type FieldType,
  type Logger,
  type NatsConfig,
  NothingToPromoteError,
  NothingToRollBackError,
  type PipelineCheckpoint,
  PipelineCheckpointSchema,
  type PipelineProgress,
  parseConfigOrThrow,
  SchemaMismatchError,
  SluiceError,
  type SwitchCause,
  type SwitchOutcome,
  silentLogger,
  type WritableCache,
  type WritableCacheCatalog,
} from '@sluice/core';
import { type ConnectionContext, sourceFor } from './addresses.js';
import { BadRecordCollector } from './bad-records.js';
import { dagHash, decideRestart, type RestartPlan } from './dag.js';
import type { Row } from './ops.js';
import { filterProcessor, selectProcessor } from './processors.js';
import { ProgressTracker } from './progress.js';
import { runPipeline } from './run.js';
import { inferCsvFields, inferFields } from './schema.js';
import { announceRedirect, type CacheSink, createCacheSink } from './sinks/cache.js';
import { isReplicationSource } from './sources/replication/source.js';
import { switchHoldReason } from './switch-gate.js';
import type { PipelineProcessor, SourceBranch } from './types.js';

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
}

interface Run {
  controller: AbortController;
  finished: Promise<void>;
  cache: WritableCache;
  sink: CacheSink;
}

/**
 * Starts the pipeline that materializes an endpoint into a cache behind the alias `endpoint.name`.
 * On start it compares the pipeline checkpoint with the cache's commit checkpoint and asks the source
 * whether it can resume: consistent and resumable → continue in place (restart case 1); otherwise a new
 * generation (green) is built while the alias keeps pointing at the old one (blue), and the alias moves,
 * with one `AliasRedirected` event, only when every source finished its snapshot (case 4). A changed
 * schema, key or index set takes the same path. A failed run is retried after a back-off.
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
  const progress = new ProgressTracker();
  const connections = {
    connections: ctx.connections,
    ...(ctx.nats !== undefined ? { nats: ctx.nats } : {}),
    ...(ctx.baseDir !== undefined ? { baseDir: ctx.baseDir } : {}),
    ...(ctx.nodeId !== undefined ? { nodeId: ctx.nodeId } : {}),
    ...(ctx.replication !== undefined ? { replication: ctx.replication } : {}),
  };
  const renames: Record<string, string> =
    endpoint.select && !Array.isArray(endpoint.select) ? endpoint.select : {};
  const sourceName = (field: string) => renames[field] ?? field;
  const sourceKey = endpoint.primaryKey.map(sourceName);

  const processors: PipelineProcessor[] = [];
  if (endpoint.filter) processors.push(filterProcessor(`${name}.filter`, endpoint.filter, sourceKey));
  if (endpoint.select) processors.push(selectProcessor(`${name}.select`, endpoint.select));

  const buildBranch = (csvFields?: Record<string, FieldType>, sampling = false): SourceBranch => ({
    source: sourceFor(endpoint.source, `${name}.source`, connections, {
      ...(csvFields ? { fields: csvFields } : {}),
      key: sourceKey,
      ...(ctx.fileChunkBytes ? { chunkBytes: ctx.fileChunkBytes } : {}),
      role: 'endpoint',
      sampling,
    }),
    processors,
  });
  const isCsv = endpoint.source.type === 'file' && endpoint.source.format === 'csv';
  const csvFieldsOf = (fields: Record<string, FieldType>) => {
    const out: Record<string, FieldType> = {};
    for (const [field, type] of Object.entries(fields)) out[sourceName(field)] = type;
    return out;
  };

  /** Reads the first records (without checkpointing anything) to infer field types. */
  const sample = async (): Promise<{ raw: Row[]; processed: Row[] }> => {
    const branch = buildBranch(undefined, true);
    const controller = new AbortController();
    const raw: Row[] = [];
    const processed: Row[] = [];
    const limit = ctx.inferSample ?? 1_000;
    try {
      for await (const item of branch.source.read(null, {
        signal: controller.signal,
        mode: 'transfer',
        batchSize: Math.min(limit, 1_000),
      })) {
        if (item.kind !== 'records') break;
        for (const op of item.ops) {
          if (op.op === 'delete') continue;
          raw.push(op.record);
          let current: Row | null = op.record;
          for (const p of processors) {
            const out = p.process({ op: 'upsert', record: current });
            current = out !== null && !Array.isArray(out) && out.op !== 'delete' ? out.record : null;
            if (current === null) break;
          }
          if (current) processed.push(current);
        }
        if (raw.length >= limit) break;
      }
    } finally {
      controller.abort();
      await branch.source.close();
    }
    return { raw, processed };
  };

  /** The cache schema: configured fields, else the current generation's when its key and indexes match, else inferred. */
  const resolveSchema = async (
    reuse: boolean,
  ): Promise<{ schema: CacheSchema; csvFields?: Record<string, FieldType> }> => {
    const base = { primaryKey: endpoint.primaryKey, indexes: endpoint.indexes };
    if (endpoint.fields) {
      const schema = { fields: endpoint.fields, ...base };
      return isCsv ? { schema, csvFields: csvFieldsOf(endpoint.fields) } : { schema };
    }
    const target = caches.resolveAlias(name);
    if (reuse && target) {
      const info = await caches.info(target.cache);
      if (
        info &&
        sameJson(info.schema.primaryKey, base.primaryKey) &&
        sameJson(info.schema.indexes, base.indexes)
      )
        return isCsv
          ? { schema: info.schema, csvFields: csvFieldsOf(info.schema.fields) }
          : { schema: info.schema };
    }
    const { raw, processed } = await sample();
    let fields: Record<string, FieldType>;
    let csvFields: Record<string, FieldType> | undefined;
    if (isCsv) {
      const header = raw.length > 0 ? Object.keys(raw[0]!) : [];
      csvFields = inferCsvFields(
        header,
        raw.map((r) => header.map((h) => String(r[h] ?? ''))),
      );
      fields = {};
      for (const out of processed.length > 0 ? Object.keys(processed[0]!) : []) {
        fields[out] = csvFields[sourceName(out)] ?? 'string';
      }
    } else fields = inferFields(processed);
    for (const field of [...endpoint.primaryKey, ...endpoint.indexes.flat()]) fields[field] ??= 'string';
    return { schema: { fields, ...base }, ...(csvFields ? { csvFields } : {}) };
  };

  let branch: SourceBranch | null = null;
  let current: Run | null = null;
  let decision: { decision: 'resume' | 'from-scratch'; reason: string } = {
    decision: 'from-scratch',
    reason: 'not started',
  };
  let lastCheckpoint: PipelineCheckpoint | null = null;
  let lastError: { code: string; message: string } | null = null;
  let stopped = false;
  let supervisor: Promise<void> | null = null;
  const supervisorController = new AbortController();
  const servingWaiters = new Set<() => void>();

  const loadPipelineCheckpoint = async (fallback: PipelineCheckpoint | null) => {
    if (!ctx.checkpoint) return fallback;
    const parsed = PipelineCheckpointSchema.safeParse(await ctx.checkpoint.load());
    return parsed.success ? parsed.data : null;
  };

  /** Chooses the generation to write and how (the restart decision). */
  const plan = async (
    force: boolean,
  ): Promise<{
    cache: WritableCache;
    plan: RestartPlan;
    sink: Run['sink'];
    schema: CacheSchema;
    cause: SwitchCause | null;
  }> => {
    const { schema, csvFields } = await resolveSchema(!force);
    await branch?.source.close();
    branch = buildBranch(csvFields);
    await branch.source.preflight?.();
    const sources = [branch.source.handle];
    let cause: SwitchCause = force ? 'rebuild' : 'restart';
    const makeSink = (cache: WritableCache) =>
      createCacheSink({
        cause,
        holdReason: () => holdReason(cache),
        handle: `${name}.cache`,
        endpoint: name,
        caches,
        cache,
        schema,
        sources,
        events: ctx.events,
        logger,
        onRedirected: () => {
          for (const wake of servingWaiters) wake();
        },
      });
    const tryResume = async (cacheName: string, label: string) => {
      let cache: WritableCache;
      try {
        cache = await caches.openRw(cacheName, schema);
      } catch (err) {
        if (SluiceError.hasCode(err, 'CACHE_SCHEMA_MISMATCH') || err instanceof SchemaMismatchError) {
          if (!force) cause = 'schema-change';
          return { reason: `the schema, key or indexes changed (${(err as Error).message})` };
        }
        throw err;
      }
      const sink = makeSink(cache);
      const committed = cache.commitState().checkpoint;
      const restart = await decideRestart({
        dag: dagHash([branch!], sink),
        branches: [branch!],
        sink,
        checkpoint: await loadPipelineCheckpoint(committed),
        sinkCheckpoint: committed,
      });
      if (restart.decision === 'resume')
        return {
          run: {
            cache,
            sink,
            schema,
            cause: null,
            plan: { ...restart, reason: `${label}: ${restart.reason}` },
          },
        };
      return { reason: restart.reason, cache, sink };
    };

    const target = caches.resolveAlias(name);
    const generations = (await caches.list()).filter((c) => c.endpoint === name);
    const targetCreatedAt = generations.find((c) => c.name === target?.cache)?.createdAt ?? '';
    // A green generation newer than the alias target means a rebuild was under way (requested, forced by a
    // source that could not resume, or a schema change) when the last run stopped: it takes precedence over
    // continuing in place, so a crash never silently drops a rebuild. Older ones were superseded (gc's job).
    const greens = generations
      .filter((c) => c.state === 'building' && c.name !== target?.cache && c.createdAt > targetCreatedAt)
      .sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
    let reason = target ? '' : 'the endpoint has no cache yet';
    if (target && !force && greens.length === 0) {
      const attempt = await tryResume(target.cache, `continuing in place in ${target.cache}`);
      if (attempt.run) return attempt.run;
      await attempt.cache?.close();
      reason = attempt.reason;
    }
    if (force) reason = 'rebuild requested';
    else if (greens.length > 0) reason = `a rebuild into ${greens[0]!.name} was interrupted`;
    for (const green of greens.slice(0, 1)) {
      // The interrupted rebuild keeps the cause it was started for.
      if (!force && green.notes.cause) cause = green.notes.cause;
      const attempt = await tryResume(green.name, `continuing the rebuild in ${green.name}`);
      if (attempt.run && !force) return { ...attempt.run, cause };
      if (attempt.cache && attempt.sink)
        return {
          cache: attempt.cache,
          sink: attempt.sink,
          schema,
          cause,
          plan: {
            decision: 'from-scratch',
            reason: `${reason}; rebuilding into ${green.name}`,
            checkpoint: null,
          },
        };
      await attempt.run?.cache.close();
      reason = `${reason} and cannot be continued (${attempt.reason})`;
    }
    const cache = await caches.create({ endpoint: name, schema });
    return {
      cache,
      sink: makeSink(cache),
      schema,
      cause,
      plan: { decision: 'from-scratch', reason: `${reason}; building ${cache.name}`, checkpoint: null },
    };
  };

  /** The gates of `endpoint.switch`, asked when a green generation finished its snapshot. */
  const holdReason = async (cache: WritableCache): Promise<string | null> => {
    const target = caches.resolveAlias(name);
    const serving = target && target.cache !== cache.name ? await caches.info(target.cache) : null;
    return switchHoldReason(endpoint.switch, {
      records: cache.commitState().recordCount,
      servingRecords: serving ? serving.recordCount : null,
      badRecords: progress.badRecords,
    });
  };

  const launch = async (force: boolean) => {
    await start(await plan(force));
  };

  /** Starts a run into the chosen generation (the restart decision already made), noting the decision on it. */
  const start = async (chosen: {
    cache: WritableCache;
    plan: RestartPlan;
    sink: Run['sink'];
    schema: CacheSchema;
    cause: SwitchCause | null;
  }) => {
    decision = { decision: chosen.plan.decision, reason: chosen.plan.reason };
    logger.info({ endpoint: name, ...decision, cache: chosen.cache.name }, 'endpoint restart decision');
    await caches
      .annotate(chosen.cache.name, { decision, ...(chosen.cause ? { cause: chosen.cause } : {}) })
      .catch((err) => logger.warn({ err, endpoint: name }, 'could not note the restart decision'));
    await chosen.sink.prepare(chosen.plan);
    lastCheckpoint = chosen.plan.checkpoint;
    const controller = new AbortController();
    const badRecords = new BadRecordCollector('skip', (report) =>
      logger.warn({ endpoint: name, ...report }, 'bad record'),
    );
    const activeBranch = branch!;
    const finished = runPipeline({
      name,
      dag: dagHash([activeBranch], chosen.sink),
      branches: [activeBranch],
      sink: chosen.sink,
      mode: 'endpoint',
      plan: chosen.plan,
      badRecords,
      signal: controller.signal,
      ...(ctx.checkpoint ? { saveCheckpoint: (c: PipelineCheckpoint) => ctx.checkpoint!.save(c) } : {}),
      // The cache refuses values of another type than its schema's; here they become bad records instead.
      fields: chosen.schema.fields,
      ...(ctx.commitEveryRecords !== undefined ? { commitEveryRecords: ctx.commitEveryRecords } : {}),
      ...(ctx.commitEveryMs !== undefined ? { commitEveryMs: ctx.commitEveryMs } : {}),
      progress,
      ...(ctx.onProgress ? { onProgress: ctx.onProgress } : {}),
      onCommit: (checkpoint) => {
        lastCheckpoint = checkpoint;
      },
      logger,
    }).then(() => {});
    current = { controller, finished, cache: chosen.cache, sink: chosen.sink };
    lastError = null;
  };

  const halt = async () => {
    const run = current;
    current = null;
    if (!run) return;
    run.controller.abort();
    await run.finished.catch(() => {});
    await run.sink.close().catch(() => {});
  };

  /** Keeps the pipeline running: a failed run (or a failed re-plan) is retried after a growing back-off. */
  const supervise = async () => {
    let backoff = ctx.retryMs ?? 1_000;
    while (!stopped) {
      const run = current;
      if (run) {
        try {
          await run.finished;
          return; // every source ended (a non-following file): idle, serving what was built
        } catch (err) {
          if (stopped || current !== run) return;
          lastError = {
            code: SluiceError.isInstance(err) ? err.code : 'INTERNAL',
            message: (err as Error).message,
          };
          await halt();
          if (SluiceError.hasCode(err, 'SOURCE_SCHEMA_CHANGED')) {
            // The table changed in a way this generation cannot take: a new one, the old serving meanwhile.
            logger.warn({ endpoint: name, err }, 'source schema changed; building a new generation');
            try {
              await launch(true);
              backoff = ctx.retryMs ?? 1_000;
              continue;
            } catch (relaunch) {
              lastError = {
                code: SluiceError.isInstance(relaunch) ? relaunch.code : 'INTERNAL',
                message: (relaunch as Error).message,
              };
            }
          } else logger.error({ endpoint: name, err }, 'endpoint pipeline failed; retrying');
        }
      }
      try {
        await delay(backoff, undefined, { signal: supervisorController.signal });
      } catch {
        return;
      }
      backoff = Math.min(backoff * 2, 30_000);
      try {
        await launch(false);
      } catch (err) {
        lastError = {
          code: SluiceError.isInstance(err) ? err.code : 'INTERNAL',
          message: (err as Error).message,
        };
        logger.error({ endpoint: name, err }, 'endpoint pipeline could not restart; retrying');
      }
    }
  };

  await launch(false);
  supervisor = supervise();

  const stop = async () => {
    if (stopped) return;
    stopped = true;
    supervisorController.abort();
    await halt();
    await supervisor?.catch(() => {});
    await branch?.source.close();
    for (const wake of servingWaiters) wake();
  };

  const servingCache = () => caches.resolveAlias(name)?.cache ?? null;
  const replicationStatus = (): EndpointPipelineStatus['replication'] => {
    const source = branch?.source;
    if (!source || !isReplicationSource(source)) return null;
    const lag = source.replicationLag();
    return {
      slot: source.slot,
      committedLsn: source.committedLsn(),
      lagBytes: lag?.bytes ?? null,
      lagSeconds: lag?.seconds ?? null,
    };
  };

  /** Operator actions (rebuild, promote, rollback) run one at a time. */
  let steering: Promise<unknown> = Promise.resolve();
  const exclusive = <T>(action: () => Promise<T>): Promise<T> => {
    const next = steering.then(action, action);
    steering = next.catch(() => {});
    return next;
  };
  const assertRunning = () => {
    if (stopped)
      throw new SluiceError({ code: 'INTERNAL', message: `Endpoint pipeline "${name}" is stopped` });
  };

  const promote = async (): Promise<SwitchOutcome> => {
    assertRunning();
    const run = current;
    if (run && !run.sink.redirected && run.sink.held !== null) {
      const { from, to } = await run.sink.promote();
      return { endpoint: name, from, to, cause: 'promote', changed: true };
    }
    const last = caches.history(name)[0];
    if (last?.cause === 'promote' && last.to === servingCache())
      return { endpoint: name, from: last.from, to: last.to, cause: 'promote', changed: false };
    throw new NothingToPromoteError(name);
  };

  const rollback = async (to?: string): Promise<SwitchOutcome> => {
    assertRunning();
    const serving = servingCache();
    const history = caches.history(name);
    const last = history[0];
    if (to === undefined && last?.cause === 'rollback' && last.to === serving)
      return { endpoint: name, from: last.from, to: last.to, cause: 'rollback', changed: false };
    if (to !== undefined && to === serving)
      return { endpoint: name, from: serving, to, cause: 'rollback', changed: false };
    const targetName = to ?? (last?.to === serving ? last?.from : null) ?? null;
    if (targetName === null) throw new NothingToRollBackError(name, 'no earlier generation served it');
    const info = await caches.info(targetName);
    if (!info || info.endpoint !== name || info.switchedAt === null)
      throw new NothingToRollBackError(
        name,
        `${targetName} is not a retained generation that served it (it may have been garbage-collected)`,
      );
    // Decide on a branch and sink of its own: the running generation is untouched until the decision is made.
    // The schema as a run of today's configuration would write it (configured fields, else the generation's own).
    const schema: CacheSchema = endpoint.fields
      ? { fields: endpoint.fields, primaryKey: endpoint.primaryKey, indexes: endpoint.indexes }
      : info.schema;
    const candidate = buildBranch(isCsv ? csvFieldsOf(schema.fields) : undefined);
    let cache: WritableCache | null = null;
    let halted = false;
    try {
      try {
        cache = await caches.openRw(targetName, schema);
      } catch (err) {
        if (SluiceError.hasCode(err, 'CACHE_SCHEMA_MISMATCH') || err instanceof SchemaMismatchError)
          throw new CannotResumeError(name, targetName, 'it was built for another schema, key or index set');
        throw err;
      }
      const probe = createCacheSink({
        handle: `${name}.cache`,
        endpoint: name,
        caches,
        cache,
        schema,
        sources: [candidate.source.handle],
      });
      const committed = cache.commitState().checkpoint;
      const restart = await decideRestart({
        dag: dagHash([candidate], probe),
        branches: [candidate],
        sink: probe,
        checkpoint: committed,
        sinkCheckpoint: committed,
      });
      if (restart.decision !== 'resume') throw new CannotResumeError(name, targetName, restart.reason);
      halted = true;
      await halt();
      await supervisor?.catch(() => {});
      const { from, version } = await caches.redirect(name, targetName, { cause: 'rollback' });
      for (const generation of await caches.list())
        if (generation.endpoint === name && generation.state === 'building' && generation.name !== targetName)
          await caches.retire(generation.name);
      await announceRedirect(ctx.events, logger, {
        alias: name,
        from,
        to: targetName,
        version,
        checkpoint: restart.checkpoint,
        cause: 'rollback',
      });
      await branch?.source.close();
      branch = candidate;
      const sink = createCacheSink({
        handle: `${name}.cache`,
        endpoint: name,
        caches,
        cache,
        schema,
        sources: [candidate.source.handle],
        events: ctx.events,
        logger,
      });
      const rolledBack = cache;
      cache = null;
      await start({
        cache: rolledBack,
        sink,
        schema,
        cause: null,
        plan: { ...restart, reason: `rolled back to ${targetName}: ${restart.reason}` },
      });
      supervisor = supervise();
      for (const wake of servingWaiters) wake();
      return { endpoint: name, from, to: targetName, cause: 'rollback', changed: true };
    } catch (err) {
      if (cache) await cache.close().catch(() => {});
      if (branch !== candidate) await candidate.source.close().catch(() => {});
      if (halted && !current) {
        // Stopped for the rollback, which then failed: the supervisor plans from the alias table again.
        lastError = {
          code: SluiceError.isInstance(err) ? err.code : 'INTERNAL',
          message: (err as Error).message,
        };
        supervisor = supervise();
      }
      throw err;
    }
  };

  return {
    get decision() {
      return decision;
    },
    status() {
      const building = current && !current.sink.redirected ? current.cache.name : null;
      return {
        endpoint: name,
        alias: name,
        servingCache: servingCache(),
        buildingCache: building,
        checkpoint: lastCheckpoint,
        progress: progress.snapshot(),
        held:
          current && !current.sink.redirected && current.sink.held !== null
            ? { cache: current.cache.name, reason: current.sink.held }
            : null,
        error: lastError,
        replication: replicationStatus(),
      };
    },
    rebuild: () =>
      exclusive(async () => {
        assertRunning();
        await halt();
        await supervisor?.catch(() => {});
        await launch(true);
        supervisor = supervise();
      }),
    promote: () => exclusive(promote),
    rollback: (to?: string) => exclusive(() => rollback(to)),
    stop,
    async whenServing(options = {}) {
      const deadline = Date.now() + (options.timeoutMs ?? 60_000);
      for (;;) {
        if (current?.sink.redirected) return current.cache.name;
        if (stopped)
          throw new SluiceError({ code: 'INTERNAL', message: `Endpoint pipeline "${name}" stopped` });
        const remaining = deadline - Date.now();
        if (remaining <= 0)
          throw new SluiceError({
            code: 'INTERNAL',
            message: `Endpoint "${name}" did not finish its snapshot in time`,
          });
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

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
