import {
  aliasRedirected,
  type RecordOp as CacheRecordOp,
  type CacheSchema,
  type ConflictPolicy,
  type EventPublisher,
  type Logger,
  type PipelineCheckpoint,
  SinkError,
  SluiceError,
  type SwitchCause,
  SwitchNotCaughtUpError,
  silentLogger,
  snapshottingDone,
  type WritableCache,
  type WritableCacheCatalog,
} from '@sluice/core';
import { z } from 'zod';
import { isPatch, type RecordOp } from '../ops.js';
import type { PipelineSink, SinkFence, SinkWriteResult } from '../types.js';
import { PendingSends, SEND_WAIT_ON_CLOSE_MS } from './pending-sends.js';

/** A partial upsert (core's upsert leaving fields `unchanged`, with a `where` decided on the merged record). */
type PatchUpsert = Extract<CacheRecordOp, { op: 'upsert' }>;

export interface CacheSinkOptions {
  handle: string;
  /** The endpoint (and alias) name. */
  endpoint: string;
  caches: WritableCacheCatalog;
  /** The cache generation written to: the alias target (resume in place) or a green one being built. */
  cache: WritableCache;
  schema: CacheSchema;
  /** Every source handle of the endpoint; the alias moves only when all of them finished their snapshot. */
  sources: readonly string[];
  events?: EventPublisher;
  logger?: Logger;
  /** Called once the alias points at `cache`. */
  onRedirected?: (event: { from: string | null; to: string; version: number }) => void;
  /** Why this generation was built: the cause its switch records (default `rebuild`). */
  cause?: SwitchCause;
  /**
   * Asked once every source finished its snapshot, before the alias moves: a reason to hold the generation
   * (a switch gate broken, manual mode) or null to switch. A held generation keeps being written; only
   * {@link CacheSink.promote} moves the alias to it then.
   */
  holdReason?: () => Promise<string | null>;
  /**
   * Asked before the alias moves to this generation, and again at each of its commits until it says yes: whether it
   * has caught up with what readers get now (docs/generations.md § The switch hands over at a position). Without it
   * the alias moves as soon as the gates allow.
   */
  handover?: SwitchHandover;
  /**
   * The most changes the run writes between two commits outside a source transaction (its commit cadence plus one
   * batch): the cache keeps that many staged in memory before it spills to its staging area (core's
   * `ApplyOptions.holdInMemory`), so only a source transaction larger than a commit spills.
   */
  commitSize?: number;
}

/**
 * What a cache sink asks before it moves the alias to its generation: the serving generation hands readers over only
 * at a position the new one has committed, so the positions readers see never go back.
 */
export interface SwitchHandover {
  /**
   * True when the alias may move now to the generation that last committed `committed`; false to be asked again at
   * its next commit. Saying yes may stop the serving generation committing (its follower paused), so a yes is
   * followed by the move or by {@link SwitchHandover.settle}`(false)`.
   */
  ready(committed: PipelineCheckpoint | null): Promise<boolean>;
  /** The switch was made (`moved`) or given up (the run stopped, a promote timed out): the serving one goes on. */
  settle(moved: boolean): Promise<void>;
  /** How long a promote waits for the hand-over before it gives up (nothing changes), ms. */
  readonly waitMs: number;
  /**
   * The position the generation had to reach, as last compared: the serving generation's last committed LSN (the
   * barrier while it was paused), as `<source handle>=<lsn>`; null before any comparison. What a promote that timed
   * out names beside the generation's own position.
   */
  readonly target: string | null;
}

/** The blue/green cache sink, with what the endpoint pipeline steers it by. */
export interface CacheSink extends PipelineSink {
  /** The alias points at this sink's generation. */
  readonly redirected: boolean;
  /** The generation finished its snapshot and is held by a gate: why. */
  readonly held: string | null;
  /** Moves the alias to a held generation (cause `promote`), whatever the gates said. */
  promote(): Promise<{ from: string | null; to: string; version: number }>;
}

/**
 * Publishes `AliasRedirected` for a move the caller made; a publish failure is logged, never thrown (readers also
 * reconcile from the alias table, so a lost event delays them, never misleads them). A backplane that kept the
 * redirect to publish once it reconnects (`details.deferred`) has not lost it: that is said at `info`.
 *
 * The publisher is called before this returns its promise, so moves reach the backplane in the order they were
 * made; the promise settles once the backplane confirmed (or gave up). Nothing on the data path waits for it — a hung
 * NATS would hold the generation's commits — but hands it to a {@link PendingSends} (the cache sink and a rollback do).
 *
 * @example
 * ```ts
 * sends.start(() => announceRedirect(events, logger, { alias: 'items', from, to, version, checkpoint, cause: 'rollback' }), () => {});
 * ```
 */
export async function announceRedirect(
  events: EventPublisher | undefined,
  logger: Logger,
  move: {
    alias: string;
    from: string | null;
    to: string;
    version: number;
    checkpoint: PipelineCheckpoint | null;
    cause: SwitchCause;
  },
): Promise<void> {
  logger.info(
    { endpoint: move.alias, from: move.from, to: move.to, version: move.version, cause: move.cause },
    'alias redirected',
  );
  if (!events) return;
  try {
    await events.publish(aliasRedirected(move));
  } catch (err) {
    if (SluiceError.isInstance(err) && err.details?.deferred === true)
      logger.info(
        { endpoint: move.alias, reason: err.message },
        'AliasRedirected kept by the backplane; published once NATS takes it',
      );
    else logger.warn({ err, endpoint: move.alias }, 'could not publish AliasRedirected');
  }
}

/**
 * The blue/green cache sink. Writes keyed upserts and deletes into one cache generation and commits them
 * with the pipeline checkpoint in one LMDB transaction. When the generation is not (yet) the alias
 * target, the alias moves to it only once every source reported `SnapshottingDone` (and that is committed),
 * then `AliasRedirected` is published once; the previous generation is retired by the redirect. A crash
 * before that leaves the alias on the old generation.
 *
 * @example
 * ```ts
 * const sink = createCacheSink({ handle: 'items.cache', endpoint: 'items', caches, cache: green, schema,
 *   sources: ['items.source'], events });
 * ```
 */
export function createCacheSink(options: CacheSinkOptions): CacheSink {
  const logger = options.logger ?? silentLogger;
  const { cache, caches } = options;
  let redirected = caches.resolveAlias(options.endpoint)?.cache === cache.name;
  const done = new Set(cache.commitState().snapshottingDone);
  let redirecting: Promise<{ from: string | null; to: string; version: number }> | null = null;
  let held: string | null = null;
  let lastCheckpoint: PipelineCheckpoint | null = null;
  let gating: Promise<void> | null = null;
  /** What the cache may keep staged in memory before it spills (see {@link CacheSinkOptions.commitSize}). */
  const inMemory = options.commitSize !== undefined ? { holdInMemory: options.commitSize } : {};
  /** A switch decided (gates passed, or promoted) and not made yet: it waits for the hand-over. */
  let pending: SwitchCause | null = null;
  let checking: Promise<void> | null = null;
  /** Woken when the alias moved (a promote waits for it). */
  const movedWaiters = new Set<() => void>();
  /** `SnapshottingDone` and `AliasRedirected` on their way to the backplane: no commit waits for them. */
  const sends = new PendingSends();
  const unexpected = (what: string) => (err: unknown) =>
    logger.warn({ err, endpoint: options.endpoint }, `could not publish ${what}`);

  const moveAlias = (cause: SwitchCause) => {
    redirecting ??= (async () => {
      const { from, version } = await caches.redirect(options.endpoint, cache.name, { cause });
      redirected = true;
      held = null;
      pending = null;
      for (const wake of movedWaiters) wake();
      await options.handover?.settle(true);
      options.onRedirected?.({ from, to: cache.name, version });
      // Not awaited: this generation serves now, and the commit that made the switch must not wait for NATS to
      // confirm (a hung server would stop it committing until it answered). The backplane keeps the redirect until
      // NATS takes it; api-servers also follow the alias table.
      const checkpoint = lastCheckpoint;
      sends.start(
        () =>
          announceRedirect(options.events, logger, {
            alias: options.endpoint,
            from,
            to: cache.name,
            version,
            checkpoint,
            cause,
          }),
        unexpected('AliasRedirected'),
      );
      return { from, to: cache.name, version };
    })();
    return redirecting;
  };
  /**
   * Makes the pending switch if the hand-over allows it now (else it is asked again at the next commit). One check at
   * a time: a commit and a promote may ask together.
   */
  const trySwitch = async (): Promise<void> => {
    if (pending === null || redirecting !== null) return;
    checking ??= (async () => {
      const handover = options.handover;
      const ready = handover === undefined || (await handover.ready(lastCheckpoint));
      if (!ready) return;
      const cause = pending;
      // Given up while the hand-over was asked (a promote timed out): the serving one goes on.
      if (cause === null) return void (await handover?.settle(false));
      await moveAlias(cause);
    })().finally(() => {
      checking = null;
    });
    await checking;
  };
  /** Gives up the pending switch (the run stopped, a promote timed out): the serving generation goes on as before. */
  const abandonSwitch = async () => {
    if (pending === null || redirected) return;
    pending = null;
    await checking?.catch(() => {});
    if (!redirected) await options.handover?.settle(false);
  };

  const redirectWhenReady = async (checkpoint: PipelineCheckpoint | null) => {
    lastCheckpoint = checkpoint ?? lastCheckpoint;
    if (redirected || held !== null || !options.sources.every((s) => done.has(s))) return;
    gating ??= (async () => {
      const notes = (await caches.info(cache.name))?.notes ?? {};
      const at = new Date().toISOString();
      // A hold survives restarts: a held generation resumed after a restart stays held until promoted.
      const reason = notes.held?.reason ?? (await options.holdReason?.()) ?? null;
      await caches.annotate(cache.name, {
        snapshotDoneAt: notes.snapshotDoneAt ?? at,
        ...(reason !== null ? { held: notes.held ?? { reason, at } } : {}),
      });
      if (reason !== null) {
        held = reason;
        logger.warn(
          { endpoint: options.endpoint, cache: cache.name, reason },
          'generation held: the alias stays',
        );
        return;
      }
      pending = options.cause ?? 'rebuild';
      await trySwitch();
    })().finally(() => {
      gating = null;
    });
    await gating;
  };

  return {
    handle: options.handle,
    description: { type: 'cache', endpoint: options.endpoint, schema: options.schema },
    keyFields: options.schema.primaryKey,
    keepsCheckpoint: true,
    get redirected() {
      return redirected;
    },
    get held() {
      return held;
    },
    async promote() {
      if (redirected && !redirecting) throw new SinkError(`Cache ${cache.name} already serves`);
      if (redirecting) return redirecting;
      // The alias moves once this generation caught up with what readers get (the hand-over), within the wait.
      const waitMs = options.handover?.waitMs ?? 0;
      let wake = () => {};
      const moved = new Promise<void>((resolve) => {
        wake = resolve;
      });
      movedWaiters.add(wake);
      const timer = setTimeout(wake, waitMs);
      try {
        pending = 'promote';
        await trySwitch();
        if (!redirecting) await moved;
        if (!redirecting) await checking?.catch(() => {});
        if (redirecting) return await redirecting;
      } finally {
        clearTimeout(timer);
        movedWaiters.delete(wake);
      }
      await abandonSwitch();
      if (redirecting) return await redirecting;
      throw new SwitchNotCaughtUpError(
        options.endpoint,
        cache.name,
        sourcePositions(lastCheckpoint),
        waitMs,
        options.handover?.target ?? null,
      );
    },
    async committed() {
      return cache.commitState().checkpoint;
    },
    async prepare({ decision }) {
      if (decision === 'from-scratch' && cache.commitState().recordCount > 0) await cache.clear();
      if (decision === 'from-scratch') done.clear();
      if (redirected) return;
      if (decision === 'resume') {
        // A generation held before a restart stays held (its snapshot is done; it is not gated again).
        const notes = (await caches.info(cache.name))?.notes;
        if (notes?.held) held = notes.held.reason;
      } else await caches.annotate(cache.name, { held: null, snapshotDoneAt: null });
    },
    acceptsPatches: true,
    async write(ops: RecordOp[]) {
      let out: CacheRecordOp[] = [];
      let refused: SinkWriteResult['refused'] | null = null;
      const apply = (batch: CacheRecordOp[], onConflict: ConflictPolicy) => {
        try {
          cache.apply(batch, { onConflict, ...inMemory });
        } catch (err) {
          throw new SinkError(`Cache ${cache.name}: ${(err as Error).message}`, { cause: err });
        }
      };
      for (const op of ops) {
        if (op.op === 'delete' || !isPatch(op)) {
          out.push(op.op === 'delete' ? { op: 'delete', key: op.key } : { op: 'upsert', record: op.record });
          continue;
        }
        // A partial upsert (unchanged TOAST values): the cache fills it from the record it holds, in the commit's
        // write transaction. Applied alone, after what came before it, so one without a record to fill from is
        // refused (CACHE_CONFLICT) on its own.
        if (out.length > 0) apply(out, 'overwrite');
        out = [];
        const patch = op;
        const upsert: PatchUpsert = {
          op: 'upsert',
          record: patch.record,
          ...(patch.unchanged !== undefined ? { unchanged: patch.unchanged } : {}),
          ...(patch.where !== undefined ? { where: patch.where } : {}),
          ...(patch.from !== undefined ? { from: patch.from } : {}),
        };
        try {
          cache.apply([upsert], { onConflict: 'fail', ...inMemory });
        } catch (err) {
          if (!SluiceError.hasCode(err, 'CACHE_CONFLICT'))
            throw new SinkError(`Cache ${cache.name}: ${(err as Error).message}`, { cause: err });
          refused ??= [];
          refused.push({
            op,
            reason: `unchanged TOAST value(s) of ${(patch.unchanged ?? []).join(', ')} not sent, and the endpoint holds no record to take them from`,
          });
        }
      }
      if (out.length > 0) apply(out, 'overwrite');
      return refused === null ? undefined : { refused };
    },
    async truncate() {
      // Deletes of every committed key and of every key staged since the last commit, in this epoch: the
      // truncate becomes visible with the rest of its source transaction, never on its own.
      try {
        cache.truncate();
      } catch (err) {
        throw new SinkError(`Cache ${cache.name}: truncate: ${(err as Error).message}`, { cause: err });
      }
    },
    async commit(checkpoint: PipelineCheckpoint) {
      // A generation still loading its snapshot, not yet serving, is a bulk load: the cache may build its
      // indexes once at the end (see the cache's index-build.ts), so loading does not slow down as they grow;
      // and since nobody reads its change log before it serves (no feed token can point into it), the log keeps
      // only each commit's marker, not every snapshot record.
      const bulk = !redirected && !options.sources.every((s) => done.has(s));
      await cache.commit(checkpoint, bulk ? { bulk, changeLog: 'commits' } : { bulk });
      lastCheckpoint = checkpoint;
      // A switch waiting for this generation to catch up: made at the first commit that reaches the position.
      if (pending !== null) await trySwitch();
    },
    markTransaction(positions: Record<string, unknown>) {
      cache.markTransaction?.(positions);
    },
    async snapshotDone(source: string, checkpoint: PipelineCheckpoint | null) {
      if (!done.has(source)) {
        await cache.markSnapshottingDone(source);
        done.add(source);
        // Published once per source, after the mark is committed — and not awaited: the switch that follows, and
        // every commit after it, must not wait for NATS to confirm (a failure is logged; the mark is the truth).
        const events = options.events;
        if (events) {
          const event = snapshottingDone({ endpoint: options.endpoint, cache: cache.name, source });
          sends.start(() => events.publish(event), unexpected('SnapshottingDone'));
        }
      }
      await redirectWhenReady(checkpoint);
    },
    async finish() {},
    async close() {
      await abandonSwitch().catch((err: unknown) =>
        logger.warn({ err, endpoint: options.endpoint }, 'could not give the pending switch up'),
      );
      // Bounded: a stop or a restart of the run must not wait for a hung NATS either. What is left stays with the
      // backplane (a redirect in its outbox, an event in its connection's buffer).
      const left = await sends.settle(SEND_WAIT_ON_CLOSE_MS);
      if (left > 0)
        logger.info(
          { endpoint: options.endpoint, cache: cache.name, left },
          'closing the cache sink with events still on their way to the backplane',
        );
      await cache.close();
    },
  };
}

/** The LSNs a checkpoint's sources committed (`items.source=0/16B3748`), for a message; `none` without any. */
function sourcePositions(checkpoint: PipelineCheckpoint | null): string {
  const lsns = Object.entries(checkpoint?.positions ?? {}).flatMap(([handle, position]) => {
    const lsn = (position as { lsn?: unknown } | null)?.lsn;
    return typeof lsn === 'string' ? [`${handle}=${lsn}`] : [];
  });
  return lsns.length > 0 ? lsns.join(', ') : 'none';
}

/**
 * The alias of an endpoint moved off the generation a transfer writes into (a blue/green rebuild switched, a promote,
 * a rollback), so what the run wrote is not served. Thrown by the endpoint transfer sink at a commit or at its end;
 * `runTransfer` then starts the run again, and its restart decision — the checkpoint names a generation the alias no
 * longer points at — writes every record again into the one it points at now.
 *
 * @example
 * ```ts
 * try { await sink.commit(checkpoint); } catch (err) { if (err instanceof EndpointGenerationMovedError) startOver(); }
 * ```
 */
export class EndpointGenerationMovedError extends SinkError {
  constructor(endpoint: string, from: string, to: string | null) {
    super(
      `Endpoint "${endpoint}" now serves generation ${to ?? '(none)'}, not ${from} that the transfer was writing into`,
      { details: { endpoint, from, to } },
    );
  }
}

/** What an endpoint transfer's checkpoint holds for its sink: the cache (generation) its records went into. */
const EndpointTransferPositionSchema = z.object({ cache: z.string().min(1).nullable() });
type EndpointTransferPosition = z.output<typeof EndpointTransferPositionSchema>;

/**
 * A transfer into an endpoint's cache: keyed upserts into the generation the alias points at. It keeps
 * the endpoint's own checkpoint untouched (so the endpoint pipeline still resumes) and relies on replays
 * being idempotent; the transfer's progress lives in its checkpoint port.
 *
 * Each checkpoint names the cache (generation) its records went into — its sink position. A resumed run continues
 * only when the alias still points at that cache on this host: caches are per host, so a node that took the
 * transfer over on another host (or after a rebuild moved the alias) holds none of the records before the
 * checkpoint and writes them all again from scratch, instead of only the rest.
 *
 * The alias can also move while the run writes (a rebuild switches to a green generation built from the endpoint's
 * source, which holds none of the transfer's records): after each commit and at the end the sink checks that the
 * alias still points at its generation, and throws {@link EndpointGenerationMovedError} if not, so a run never ends
 * with its records in a generation that no longer serves.
 */
export function createEndpointTransferSink(options: {
  handle: string;
  endpoint: string;
  caches: WritableCacheCatalog;
  /** The transfer id: whose fencing token the cache keeps. */
  writerId: string;
  fence?: SinkFence;
  /** As {@link CacheSinkOptions.commitSize}: the run's commit cadence plus one batch. */
  commitSize?: number;
}): PipelineSink {
  let cache: WritableCache | null = null;
  /** The generation this run writes into, named in every checkpoint ({@link EndpointTransferPosition}). */
  let target: string | null = null;
  /** Throws when the alias no longer points at `target`: what this run wrote is not served there. */
  const ensureStillServed = () => {
    const serving = options.caches.resolveAlias(options.endpoint)?.cache ?? null;
    if (serving !== target) throw new EndpointGenerationMovedError(options.endpoint, target!, serving);
  };
  return {
    handle: options.handle,
    description: { type: 'endpoint', endpoint: options.endpoint },
    get keyFields() {
      return cache?.schema.primaryKey ?? [];
    },
    get fields() {
      return cache?.schema.fields;
    },
    keepsCheckpoint: true,
    async committed(pipeline) {
      // The records of `pipeline` are committed in the cache its position names (the cache commits before the
      // checkpoint is saved): they are here only if that is the cache the alias points at on this host.
      const position = EndpointTransferPositionSchema.safeParse(pipeline?.positions[options.handle]);
      if (!position.success || position.data.cache === null) return null;
      return options.caches.resolveAlias(options.endpoint)?.cache === position.data.cache
        ? (pipeline ?? null)
        : null;
    },
    position() {
      return { cache: target } satisfies EndpointTransferPosition;
    },
    async prepare() {
      const resolved = options.caches.resolveAlias(options.endpoint);
      if (resolved === null) throw new SinkError(`Endpoint "${options.endpoint}" has no cache yet`);
      target = resolved.cache;
      cache = await options.caches.openRw(resolved.cache);
    },
    async write(ops) {
      cache!.apply(
        ops.map((op) =>
          op.op === 'delete' ? { op: 'delete', key: op.key } : { op: 'upsert', record: op.record },
        ),
        {
          onConflict: 'overwrite',
          ...(options.commitSize !== undefined ? { holdInMemory: options.commitSize } : {}),
        },
      );
    },
    async commit() {
      // The epoch is checked in the cache's own write transaction, and the endpoint's checkpoint is read there
      // too (never one read before the transaction, which a concurrent pipeline commit could have moved on).
      const epoch = options.fence?.epoch ?? 0;
      await cache!.commit(null, {
        keepCheckpoint: true,
        ...(epoch > 0 ? { fence: { writer: options.writerId, epoch } } : {}),
      });
      // After the commit: a switch during it is seen too. The checkpoint of this commit is not saved then, so the
      // run starts over from one that names the old generation.
      ensureStillServed();
    },
    async finish() {
      // The last commit's checkpoint is saved by now; a switch since then would leave the tail unserved.
      ensureStillServed();
    },
    async close() {
      await cache?.close();
      cache = null;
    },
  };
}
