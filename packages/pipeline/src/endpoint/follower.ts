import {
  asSluiceError,
  ErrorCode,
  type Logger,
  type PipelineCheckpoint,
  type RetryView,
  type ServingFollowerStatus,
  SluiceError,
} from '@sluice/core';
import { ProgressTracker } from '../progress.js';
import { ReplicationPositionSchema } from '../sources/replication/position.js';
import { type StandingGeneration, slotWaitView, streamsItsSlot } from '../sources/replication/status.js';
import type { PipelineSource } from '../types.js';
import {
  assessGeneration,
  endpointSink,
  generationSlot,
  type LaunchContext,
  type Run,
  startRun,
} from './launch.js';
import { RetryBackoff } from './retry-backoff.js';
import { generationSchema } from './schema-resolution.js';

/**
 * Where the follower of an endpoint's serving generation is (docs/generations.md):
 * - `idle`: nothing to follow (the run feeds the serving generation itself);
 * - `starting`: assessing the serving generation and starting its run;
 * - `following`: its run continues it from its own checkpoint, through its own slot;
 * - `retrying`: the run failed; waiting out the back-off before starting again;
 * - `standing`: it cannot be continued (no checkpoint its slot can resume, its slot taken, the source changed
 *   under it): it stands at its last commit until the alias moves;
 * - `paused`: a switch hands the alias over (handover.ts): its run ended at a commit boundary so that the serving
 *   generation commits nothing past the position the generation switched to must reach; `resume` follows again;
 * - `stopped`: for good.
 */
export const FollowerPhase = {
  idle: 'idle',
  starting: 'starting',
  following: 'following',
  retrying: 'retrying',
  standing: 'standing',
  paused: 'paused',
  stopped: 'stopped',
} as const;
export type FollowerPhase = (typeof FollowerPhase)[keyof typeof FollowerPhase];

/** Every legal move; anything else is a bug (thrown as `INTERNAL`). */
const TRANSITIONS: Record<FollowerPhase, readonly FollowerPhase[]> = {
  idle: ['starting', 'stopped'],
  starting: ['following', 'retrying', 'standing', 'idle', 'stopped'],
  following: ['retrying', 'standing', 'paused', 'idle', 'stopped'],
  retrying: ['starting', 'paused', 'idle', 'stopped'],
  standing: ['idle', 'stopped'],
  paused: ['starting', 'idle', 'stopped'],
  stopped: [],
};

/** What a follower needs: the endpoint's launch context (its own progress and checkpoint are kept apart). */
export interface FollowerOptions {
  lc: LaunchContext;
  logger: Logger;
  /**
   * Wait before starting again after a failed run; doubles per failed attempt up to 30 s, and starts over once a
   * run recovered (retry-backoff.ts).
   */
  retryMs: number;
}

/**
 * Keeps the serving generation of an endpoint following its source while the endpoint's run feeds another one (a
 * green building or held): a second run, from the serving generation's own checkpoint, through its own replication
 * slot, written into it as any run of the serving generation (one commit per source transaction, its change log,
 * its checkpoint). It never moves the alias and never writes the pipeline's checkpoint (that is the fed
 * generation's). Told what to follow by {@link ServingFollower.follow}; one generation at a time.
 *
 * @example
 * ```ts
 * const follower = new ServingFollower({ lc, logger, retryMs: 1_000 });
 * await follower.follow('items-01…'); // the serving generation, while a green builds
 * await follower.follow(null);        // the switch: the old serving generation stops
 * ```
 */
export class ServingFollower {
  #phase: FollowerPhase = FollowerPhase.idle;
  #generation: string | null = null;
  #run: Run | null = null;
  #reason: string | null = null;
  /** The failure of its last run (or start) while it waits to retry. */
  #error: { code: string; message: string } | null = null;
  /**
   * The last failure counted, kept past the start of the next run until a run recovered: a run that waits for its
   * slot is the attempt under way after it (see {@link status}).
   */
  #lastFailure: { code: string; message: string } | null = null;
  #lastCommit: { lsn: string; at: number } | null = null;
  /**
   * From a failed run (or start) until it follows again: the failed attempts in a row, and when the next one is due
   * (epoch ms; null while it is under way) — what the status shows, as the endpoint's retry.
   */
  #retry: { attempts: number; nextAttemptAt: number | null } | null = null;
  /** The progress of its runs into the generation it follows (one tracker per generation followed). */
  #progress = new ProgressTracker();
  /** The failed attempts in a row (also through a run that failed before it recovered) and the next wait. */
  #backoff: RetryBackoff;
  /** Where the run now following started (its plan's checkpoint): a commit past it is a recovery. */
  #startedFrom: PipelineCheckpoint | null = null;
  #retryTimer: NodeJS.Timeout | null = null;
  /** Every change of what is followed, one at a time. */
  #queue: Promise<void> = Promise.resolve();

  constructor(private readonly options: FollowerOptions) {
    this.#backoff = new RetryBackoff(options.retryMs);
  }

  get phase(): FollowerPhase {
    return this.#phase;
  }
  /** The generation it follows (or tries to, or stands for), or null when idle. */
  get generation(): string | null {
    return this.#generation;
  }
  /** Why it stands (or why it last failed), or null. */
  get reason(): string | null {
    return this.#reason;
  }
  /**
   * What operators see of it (`GET /v1/endpoints` → `follower`): the generation, the phase, why it stands or what
   * it retries after, and its progress; null while it follows nothing.
   */
  status(): ServingFollowerStatus | null {
    const phase = this.#phase;
    if (phase === FollowerPhase.idle || phase === FollowerPhase.stopped || this.#generation === null)
      return null;
    const commit = this.#lastCommit;
    const slotWait = this.#slotWait();
    if (phase === FollowerPhase.following && !this.#streams()) {
      // Its run has not begun to stream its slot (it waits for the slot another process streams, or has not reached
      // it yet): nothing is followed. The attempt under way of a retry (after failed ones, shown with the last
      // failure) or, with none, a first start.
      const attempts = this.#backoff.unrecovered();
      const retrying = attempts > 0 && this.#lastFailure !== null;
      return {
        cache: this.#generation,
        phase: retrying ? FollowerPhase.retrying : FollowerPhase.starting,
        reason: retrying ? this.#lastFailure!.message : null,
        error: retrying ? this.#lastFailure : null,
        recordsWritten: this.#progress.recordsWritten,
        lastCommit: commit === null ? null : { lsn: commit.lsn, at: new Date(commit.at).toISOString() },
        retry: retrying ? { attempts, nextAttemptAt: null } : null,
        slotWait,
      };
    }
    return {
      cache: this.#generation,
      phase,
      reason:
        phase === FollowerPhase.standing || phase === FollowerPhase.retrying || phase === FollowerPhase.paused
          ? this.#reason
          : null,
      error: phase === FollowerPhase.retrying ? this.#error : null,
      recordsWritten: this.#progress.recordsWritten,
      lastCommit: commit === null ? null : { lsn: commit.lsn, at: new Date(commit.at).toISOString() },
      retry: phase === FollowerPhase.retrying || phase === FollowerPhase.starting ? this.#retryView() : null,
      slotWait,
    };
  }

  /** False while its run's replication source does not stream its slot yet; true for a source without one. */
  #streams(): boolean {
    return streamsItsSlot(this.#run?.branch.source);
  }

  /** The wait of its run's read for the replication slot another process streams, or null when none waits. */
  #slotWait(): ServingFollowerStatus['slotWait'] {
    return slotWaitView(this.#run?.branch.source);
  }

  /** The retry as the status shows it (the next attempt's time in ISO 8601), or null before a failure. */
  #retryView(): RetryView | null {
    const retry = this.#retry;
    if (retry === null) return null;
    const { attempts, nextAttemptAt } = retry;
    return { attempts, nextAttemptAt: nextAttemptAt === null ? null : new Date(nextAttemptAt).toISOString() };
  }
  /** The source of the run following `generation`, or null when it does not follow that one now. */
  sourceFollowing(generation: string): PipelineSource | null {
    return this.#phase === FollowerPhase.following && this.#generation === generation
      ? (this.#run?.branch.source ?? null)
      : null;
  }
  /**
   * Where `generation` stands when it is not followed now but this follower last committed into it (its LSN and
   * when), as the fed generation `following` goes on; null when it has nothing to say about it.
   */
  standingOf(generation: string, following: string): StandingGeneration | null {
    if (this.#generation !== generation || this.#lastCommit === null) return null;
    return { following, lsn: this.#lastCommit.lsn, since: this.#lastCommit.at };
  }

  /** The LSN of this follower's last commit into `generation`, or null when it has not committed into it. */
  lastCommitLsn(generation: string): string | null {
    return this.#generation === generation ? (this.#lastCommit?.lsn ?? null) : null;
  }

  /**
   * Stops committing into `generation` for a switch's hand-over (`why` is what the status says): a run following it
   * ends at a commit boundary (the cache holds whole source transactions only), a retry waiting to start is put off.
   * Resolves once nothing more will be committed into it by this follower; it then stays `paused` — also when told
   * to follow that same generation — until {@link resume} or a change of what is followed. A follower that does not
   * follow `generation` (idle, standing, following another) is left as it is: it commits nothing into it anyway.
   */
  pause(generation: string, why: string): Promise<void> {
    return this.#enqueue(async () => {
      if (this.#generation !== generation) return;
      if (this.#phase !== FollowerPhase.following && this.#phase !== FollowerPhase.retrying) return;
      if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
      this.#retryTimer = null;
      const run = this.#run;
      this.#run = null;
      this.#to(FollowerPhase.paused);
      this.#reason = why;
      this.#error = null;
      this.#retry = null;
      if (run) await this.#close(run);
      this.options.logger.info(
        { endpoint: this.options.lc.shape.name, cache: generation, reason: why },
        'the serving generation stops following its source for a switch',
      );
    });
  }

  /** Follows the paused `generation` again (the switch it was paused for did not happen). */
  resume(generation: string): Promise<void> {
    return this.#enqueue(async () => {
      if (this.#phase !== FollowerPhase.paused || this.#generation !== generation) return;
      this.#reason = null;
      this.options.logger.info(
        { endpoint: this.options.lc.shape.name, cache: generation },
        'the switch did not happen: the serving generation follows its source again',
      );
      await this.#startOrRetry(generation);
    });
  }

  /** Follows `generation` from now on (null: nothing). Resolves once the change is made. */
  follow(generation: string | null): Promise<void> {
    return this.#enqueue(async () => {
      if (this.#phase === FollowerPhase.stopped) return;
      if (generation !== null && generation === this.#generation) return;
      await this.#end(FollowerPhase.idle);
      if (generation !== null) await this.#startOrRetry(generation);
    });
  }

  /** Stops the run for good. */
  stop(): Promise<void> {
    return this.#enqueue(() => this.#end(FollowerPhase.stopped));
  }

  #enqueue(action: () => Promise<void>): Promise<void> {
    const next = this.#queue.then(action);
    this.#queue = next.catch((err: unknown) =>
      this.options.logger.error({ err, endpoint: this.options.lc.shape.name }, 'serving follower failed'),
    );
    return next;
  }

  #to(next: FollowerPhase): void {
    if (!TRANSITIONS[this.#phase].includes(next))
      throw new SluiceError({
        code: ErrorCode.INTERNAL,
        message: `Serving follower of "${this.options.lc.shape.name}": illegal move ${this.#phase} → ${next}`,
      });
    this.#phase = next;
  }

  /** Ends the run (or the back-off) and moves to `next` (`idle` or `stopped`). */
  async #end(next: typeof FollowerPhase.idle | typeof FollowerPhase.stopped): Promise<void> {
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    const run = this.#run;
    this.#run = null;
    if (this.#phase !== next) this.#to(next);
    this.#generation = null;
    this.#reason = null;
    this.#error = null;
    this.#lastCommit = null;
    this.#retry = null;
    this.#progress = new ProgressTracker();
    // Another generation (or none) from here on: whatever failed before was another follow's.
    this.#backoff.recovered();
    this.#lastFailure = null;
    if (run) await this.#close(run);
  }

  /** Ends `run` (between two commits: an aborted run commits nothing more) and closes its sink and source. */
  async #close(run: Run): Promise<void> {
    run.controller.abort();
    await run.finished.catch(() => {});
    await run.sink.close().catch(() => {});
    await run.branch.source.close().catch(() => {});
  }

  #stand(reason: string): void {
    this.#reason = reason;
    this.#error = null;
    this.#retry = null;
    this.#to(FollowerPhase.standing);
    this.options.logger.warn(
      { endpoint: this.options.lc.shape.name, cache: this.#generation, reason },
      'the serving generation cannot follow its source while another one is fed: it stands at its last commit',
    );
  }

  /** The launch context of this follower's runs: its own progress, no pipeline checkpoint, never the alias. */
  #context(): LaunchContext {
    const { lc } = this.options;
    return {
      shape: lc.shape,
      caches: lc.caches,
      events: lc.events,
      logger: lc.logger,
      progress: this.#progress,
      sampleSize: lc.sampleSize,
      ...(lc.commitEveryRecords !== undefined ? { commitEveryRecords: lc.commitEveryRecords } : {}),
      ...(lc.commitEveryMs !== undefined ? { commitEveryMs: lc.commitEveryMs } : {}),
      onRedirected: () => {},
      onCommit: (checkpoint) => this.#committed(checkpoint),
    };
  }

  #committed(checkpoint: PipelineCheckpoint): void {
    this.#backoff.committed(this.#startedFrom, checkpoint, `${this.options.lc.shape.name}.source`);
    const parsed = ReplicationPositionSchema.safeParse(
      checkpoint.positions[`${this.options.lc.shape.name}.source`],
    );
    if (parsed.success) this.#lastCommit = { lsn: parsed.data.lsn, at: Date.now() };
  }

  /** Starts following `generation`; a failure to start (a connection refused…) is retried after the back-off. */
  async #startOrRetry(generation: string): Promise<void> {
    try {
      await this.#start(generation);
    } catch (err) {
      if (this.#phase === FollowerPhase.starting && this.#generation === generation) this.#retryAfter(err);
      else throw err;
    }
  }

  async #start(generation: string): Promise<void> {
    const { lc, logger } = this.options;
    const { caches, shape } = lc;
    this.#generation = generation;
    this.#to(FollowerPhase.starting);
    const flc = this.#context();
    const info = await caches.info(generation);
    if (info === null) return this.#stand(`${generation} is no longer in the alias table`);
    const slot = generationSlot(flc, [info], generation)(generation);
    if (slot === undefined) return this.#stand('its source has one slot for every generation');
    // The run feeding the green reads another slot; never take one it reads.
    if (shape.openSlots().has(slot))
      return this.#stand(`its slot ${slot} is read by the generation being fed`);
    const { schema, csvFields } = generationSchema(shape, info.schema);
    const branch = shape.branch(csvFields, false, schema.fields, slot);
    let adopted = false;
    try {
      const assessed = await assessGeneration(flc, generation, schema, branch, true);
      const { cache, plan } = assessed;
      if (assessed.assessment.verdict !== 'resumable' || cache === null || plan === null) {
        await cache?.close();
        const why =
          assessed.assessment.verdict === 'schema-changed'
            ? assessed.assessment.message
            : assessed.assessment.reason;
        return this.#stand(why);
      }
      // Checked and the sink made with no wait between: a sink of a generation the alias points at never moves it.
      if (caches.resolveAlias(shape.name)?.cache !== generation || this.#phase !== FollowerPhase.starting) {
        await cache.close();
        return;
      }
      const sink = endpointSink(flc, cache, schema, branch);
      this.#startedFrom = plan.checkpoint;
      this.#backoff.started();
      const run = await startRun(flc, {
        branch,
        cache,
        sink,
        schema,
        cause: null,
        plan: { ...plan, reason: `following its source while another generation is fed: ${plan.reason}` },
        standing: null,
      });
      adopted = true;
      this.#run = run;
      this.#reason = null;
      this.#error = null;
      this.#retry = null;
      this.#to(FollowerPhase.following);
      this.#watch(run);
      logger.info(
        { endpoint: shape.name, cache: generation, slot },
        'the serving generation follows its source',
      );
    } finally {
      if (!adopted) await branch.source.close().catch(() => {});
    }
  }

  /** Answers the end of `run`: a failure is retried after the back-off; a changed source leaves it standing. */
  #watch(run: Run): void {
    // Failures of the answer itself are logged by the queue.
    run.finished.then(
      () => this.#enqueue(async () => this.#ended(run, null)).catch(() => {}),
      (err: unknown) => this.#enqueue(async () => this.#ended(run, err)).catch(() => {}),
    );
  }

  async #ended(run: Run, err: unknown): Promise<void> {
    if (this.#run !== run || this.#phase !== FollowerPhase.following) return;
    this.#run = null;
    await run.sink.close().catch(() => {});
    await run.branch.source.close().catch(() => {});
    const { logger, lc } = this.options;
    if (err === null) return this.#stand('its run ended');
    if (SluiceError.hasCode(err, 'SOURCE_SCHEMA_CHANGED')) return this.#stand((err as Error).message);
    logger.error(
      { endpoint: lc.shape.name, cache: this.#generation, err },
      'serving follower failed; retrying',
    );
    this.#retryAfter(err);
  }

  #retryAfter(err: unknown): void {
    const failure = asSluiceError(err);
    this.#reason = failure.message;
    this.#error = { code: failure.code, message: failure.message };
    this.#lastFailure = this.#error;
    this.#to(FollowerPhase.retrying);
    const generation = this.#generation!;
    const attempts = this.#backoff.failed();
    const wait = this.#backoff.waitMs();
    this.#retry = { attempts, nextAttemptAt: Date.now() + wait };
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      if (this.#retry !== null) this.#retry = { ...this.#retry, nextAttemptAt: null };
      void this.#enqueue(async () => {
        if (this.#phase !== FollowerPhase.retrying || this.#generation !== generation) return;
        await this.#startOrRetry(generation);
      }).catch(() => {});
    }, wait);
  }
}
