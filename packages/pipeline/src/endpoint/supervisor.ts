import { setTimeout as delay } from 'node:timers/promises';
import {
  type EndpointDecision,
  EndpointStoppedError,
  ErrorCode,
  type Logger,
  type PipelineCheckpoint,
  SluiceError,
} from '@sluice/core';
import type { SourceBranch } from '../types.js';
import type { Launch, Run } from './launch.js';
import { RetryBackoff } from './retry-backoff.js';

/**
 * Where an endpoint pipeline's supervisor is:
 * - `launching`: planning and starting a run;
 * - `running`: a run is in progress;
 * - `retrying`: a run or a launch failed; waiting out the back-off before planning again;
 * - `idle`: the run ended (every source ended, a file not followed): serving what was built;
 * - `halted`: stopped for an operator's rebuild or rollback, which starts what comes next;
 * - `stopped`: for good.
 */
export const SupervisorPhase = {
  launching: 'launching',
  running: 'running',
  retrying: 'retrying',
  idle: 'idle',
  halted: 'halted',
  stopped: 'stopped',
} as const;
export type SupervisorPhase = (typeof SupervisorPhase)[keyof typeof SupervisorPhase];

/** Every legal move; anything else is a bug (thrown as `INTERNAL`). */
const TRANSITIONS: Record<SupervisorPhase, readonly SupervisorPhase[]> = {
  launching: ['running', 'retrying', 'halted', 'stopped'],
  // `launching`: the source's schema changed under the run, which is replaced by a new generation at once.
  running: ['launching', 'retrying', 'idle', 'halted', 'stopped'],
  retrying: ['launching', 'halted', 'stopped'],
  idle: ['halted', 'stopped'],
  // `running`: a rollback starts its own run; `retrying`: an operator's action failed after the halt.
  halted: ['launching', 'running', 'retrying', 'stopped'],
  stopped: [],
};

/** What the supervisor needs: how to plan and start runs, and its back-off. */
export interface SupervisorOptions {
  endpoint: string;
  logger: Logger;
  /** Plans the next run (`force`: an operator's rebuild). */
  /** Plans and opens a run; `sourceChange`: the message of a source change that forces the rebuild. */
  prepare: (force: boolean, sourceChange?: string) => Promise<Launch>;
  start: (launch: Launch) => Promise<Run>;
  /**
   * Wait before re-planning after a failure; doubles per failed attempt up to 30 s, and starts over once a run
   * recovered (retry-backoff.ts).
   */
  retryMs: number;
  /** Called when the pipeline stops (wakes waiters). */
  onStopped: () => void;
  /** Called when a run starts being supervised (a launch, a retry, a rollback's run). */
  onAdopted?: (run: Run) => void;
  /** Called when the supervised run failed, before it is ended (its source still open) and retried. */
  onFailed?: (run: Run) => void;
}

/**
 * Keeps an endpoint's pipeline running: one run at a time, a failed run (or a failed re-plan) retried after a
 * growing back-off, a source whose schema changed answered at once with a new generation. Operators' actions
 * halt it first ({@link EndpointSupervisor.halt}), then hand it what runs next. Every phase change goes through
 * one transition table.
 *
 * @example
 * ```ts
 * const supervisor = new EndpointSupervisor({ endpoint: 'items', logger, prepare, start, retryMs: 1_000, onStopped });
 * await supervisor.launch(false);
 * supervisor.status; // 'running'
 * await supervisor.stop();
 * ```
 */
export class EndpointSupervisor {
  /** Halted until the first launch. */
  #phase: SupervisorPhase = SupervisorPhase.halted;
  #run: Run | null = null;
  /**
   * The last run adopted: the current one, or — after it failed, while the next is planned or retried — the one that
   * fed the endpoint's generation last. A failed run ends, its generation does not: until another run is adopted it
   * is still the generation the endpoint feeds (a green building or held), which the status must keep showing.
   */
  #fed: Run | null = null;
  #branch: SourceBranch | null = null;
  #decision: EndpointDecision = { decision: 'from-scratch', reason: 'not started' };
  #checkpoint: PipelineCheckpoint | null = null;
  #error: { code: string; message: string } | null = null;
  /** The last failure counted, kept past the adoption of the next run until a run recovered (see {@link unrecovered}). */
  #lastFailure: { code: string; message: string } | null = null;
  /** From a failure until a run is adopted again: failed attempts in a row, and when the next is due (epoch ms). */
  #retry: { attempts: number; nextAttemptAt: number | null } | null = null;
  /**
   * The failed attempts in a row and the wait before the next: unlike {@link retry}, shown only while retrying, they
   * outlive a run that is adopted and fails before it recovered (retry-backoff.ts).
   */
  #backoff: RetryBackoff;
  #loop: Promise<void> | null = null;
  /**
   * The failure last logged with its stack: while the outage lasts (no run recovered since), a run or re-plan that
   * fails again for the same reason (a source file gone for an hour) is logged at debug, not once per attempt.
   */
  #logged: { code: string; message: string } | null = null;
  /** Ends the back-off wait early (halt, stop). */
  #wake = new AbortController();

  constructor(private readonly options: SupervisorOptions) {
    this.#backoff = new RetryBackoff(options.retryMs);
  }

  get phase(): SupervisorPhase {
    return this.#phase;
  }
  /** The current (or last, when idle) run. */
  get run(): Run | null {
    return this.#run;
  }
  /**
   * The run that feeds the endpoint's generation: the current one, else (a failed run being retried, an operator's
   * action under way) the last one adopted, whose generation the next run is planned for unless something changed.
   * Its sink is closed once the run ended; what it knew (its generation, `held`, `redirected`) stays readable.
   */
  get fed(): Run | null {
    return this.#run ?? this.#fed;
  }
  /** The source branch of the current run (also while retrying: the last one planned). */
  get branch(): SourceBranch | null {
    return this.#branch;
  }
  get decision(): EndpointDecision {
    return this.#decision;
  }
  /** The checkpoint of the run's latest commit (where it started, before its first). */
  get checkpoint(): PipelineCheckpoint | null {
    return this.#checkpoint;
  }
  /** The last failure, while waiting to retry. */
  get error(): { code: string; message: string } | null {
    return this.#error;
  }
  /**
   * From a failed run (or launch) until a run starts again: the failed attempts in a row, and when the next one is
   * due (epoch ms; null while it is under way). Null while a run goes on.
   */
  get retry(): { attempts: number; nextAttemptAt: number | null } | null {
    return this.#retry;
  }

  /**
   * A run adopted after failed attempts, not recovered yet (retry-backoff.ts: it has not committed past where it
   * started): the failed attempts in a row and the last failure — that run is the attempt under way. Null once it
   * recovered, and before any failure.
   */
  get unrecovered(): { attempts: number; error: { code: string; message: string } } | null {
    const attempts = this.#backoff.unrecovered();
    return attempts > 0 && this.#lastFailure !== null ? { attempts, error: this.#lastFailure } : null;
  }

  /** Records a commit of the current run: one past where it started ends the outage it recovered from. */
  committed(checkpoint: PipelineCheckpoint): void {
    this.#checkpoint = checkpoint;
    const run = this.#run;
    if (run !== null) this.#backoff.committed(run.checkpoint, checkpoint, run.branch.source.handle);
  }

  /** Plans and starts a run, and keeps supervising it. Rejects (phase `retrying`, supervised) when it fails. */
  async launch(force: boolean): Promise<void> {
    try {
      await this.#launch(force);
    } catch (err) {
      if (this.#in(SupervisorPhase.launching)) this.#retryAfter(err);
      throw err;
    } finally {
      this.#supervise();
    }
  }

  /** Starts `launch` (planned by the caller, e.g. a rollback) on a halted supervisor, and supervises it. */
  async resume(launch: Launch): Promise<void> {
    if (this.#branch !== launch.branch) await this.#branch?.source.close();
    this.#branch = launch.branch;
    const run = await this.options.start(launch);
    this.#adopt(run);
    this.#supervise();
  }

  /** The halted supervisor's operator action failed: back to planning on its own after the back-off. */
  resumeAfterFailure(err: unknown): void {
    if (!this.#in(SupervisorPhase.halted)) return;
    this.#retryAfter(err);
    this.#supervise();
  }

  /**
   * The halted supervisor goes back to retrying as it was before an operator's action that needed no run (a promote
   * while the source is down): the failed attempts so far are kept, and the next one is due after the back-off.
   */
  retryAgain(): void {
    if (!this.#in(SupervisorPhase.halted)) return;
    this.#to(SupervisorPhase.retrying);
    this.#supervise();
  }

  /** Stops the run and the supervision for an operator's action; `EndpointStoppedError` once stopped. */
  async halt(): Promise<void> {
    this.assertNotStopped();
    this.#to(SupervisorPhase.halted);
    await this.#quiesce();
  }

  async stop(): Promise<void> {
    if (this.#in(SupervisorPhase.stopped)) return;
    this.#to(SupervisorPhase.stopped);
    await this.#quiesce();
    await this.#branch?.source.close();
    this.options.onStopped();
  }

  assertNotStopped(): void {
    if (this.#in(SupervisorPhase.stopped)) throw new EndpointStoppedError(this.options.endpoint);
  }

  /** The phase now (a method, so that checks after an `await` are not narrowed away by the compiler). */
  #in(phase: SupervisorPhase): boolean {
    return this.#phase === phase;
  }

  #to(next: SupervisorPhase): void {
    if (!TRANSITIONS[this.#phase].includes(next))
      throw new SluiceError({
        code: ErrorCode.INTERNAL,
        message: `Endpoint supervisor of "${this.options.endpoint}": illegal move ${this.#phase} → ${next}`,
      });
    this.#phase = next;
  }

  /** Ends the run and waits for the supervision loop to leave (the phase already says why). */
  async #quiesce(): Promise<void> {
    this.#wake.abort();
    await this.#endRun();
    await this.#loop?.catch(() => {});
    this.#loop = null;
    this.#wake = new AbortController();
  }

  async #endRun(): Promise<void> {
    const run = this.#run;
    this.#run = null;
    if (!run) return;
    run.controller.abort();
    await run.finished.catch(() => {});
    await run.sink.close().catch(() => {});
  }

  async #launch(force: boolean, sourceChange?: string): Promise<void> {
    this.#to(SupervisorPhase.launching);
    // The previous run's source goes first: a replication slot takes one reader at a time.
    await this.#branch?.source.close();
    this.#branch = null;
    const launch = await this.options.prepare(force, sourceChange);
    this.#branch = launch.branch;
    if (!this.#in(SupervisorPhase.launching)) {
      // Halted or stopped while planning: what was planned is dropped.
      await launch.sink.close().catch(() => {});
      throw new EndpointStoppedError(this.options.endpoint);
    }
    const run = await this.options.start(launch);
    if (!this.#in(SupervisorPhase.launching)) {
      this.#run = run;
      await this.#endRun();
      throw new EndpointStoppedError(this.options.endpoint);
    }
    this.#adopt(run);
  }

  #adopt(run: Run): void {
    this.#run = run;
    this.#fed = run;
    this.#decision = run.decision;
    this.#checkpoint = run.checkpoint;
    this.#error = null;
    this.#retry = null;
    this.#backoff.started();
    this.#to(SupervisorPhase.running);
    this.options.onAdopted?.(run);
  }

  #retryAfter(err: unknown): void {
    this.#failed(err);
    this.#to(SupervisorPhase.retrying);
  }

  /** Counts a failed run or launch: its error is kept, the next attempt is not planned yet. */
  #failed(err: unknown): void {
    this.#error = failureOf(err);
    this.#lastFailure = this.#error;
    this.#retry = { attempts: this.#backoff.failed(), nextAttemptAt: null };
  }

  /**
   * Logs a counted failure (after {@link failed}): with its stack when it starts an outage or its reason changed,
   * else — the same failure again, no run recovered in between — at debug, without one.
   */
  #logFailure(err: unknown, msg: string): void {
    const { logger, endpoint } = this.options;
    const failure = failureOf(err);
    const attempts = this.#retry?.attempts ?? 1;
    const repeated =
      attempts > 1 && this.#logged?.code === failure.code && this.#logged.message === failure.message;
    if (repeated) {
      logger.debug({ endpoint, error: failure, attempts }, msg);
      return;
    }
    this.#logged = failure;
    logger.error({ endpoint, err, attempts }, msg);
  }

  /** Starts the supervision loop unless it runs (or there is nothing to supervise). */
  #supervise(): void {
    if (this.#loop !== null) return;
    if (!this.#in(SupervisorPhase.running) && !this.#in(SupervisorPhase.retrying)) return;
    const loop = this.#superviseLoop().finally(() => {
      if (this.#loop === loop) this.#loop = null;
    });
    this.#loop = loop;
  }

  async #superviseLoop(): Promise<void> {
    const { logger, endpoint } = this.options;
    for (;;) {
      if (this.#in(SupervisorPhase.running)) {
        const run = this.#run!;
        try {
          await run.finished;
          if (this.#in(SupervisorPhase.running) && this.#run === run) this.#to(SupervisorPhase.idle);
          return;
        } catch (err) {
          if (!this.#in(SupervisorPhase.running) || this.#run !== run) return;
          this.#failed(err);
          this.options.onFailed?.(run);
          await this.#endRun();
          if (SluiceError.hasCode(err, 'SOURCE_SCHEMA_CHANGED')) {
            // The table changed in a way this generation cannot take: a new one, the old serving meanwhile.
            logger.warn({ endpoint, err }, 'source schema changed; building a new generation');
            try {
              await this.#launch(true, (err as Error).message);
              continue;
            } catch (relaunch) {
              if (!this.#in(SupervisorPhase.launching)) return;
              this.#retryAfter(relaunch);
            }
          } else {
            this.#logFailure(err, 'endpoint pipeline failed; retrying');
            this.#to(SupervisorPhase.retrying);
          }
        }
      }
      if (!this.#in(SupervisorPhase.retrying)) return;
      const wait = this.#backoff.waitMs();
      if (this.#retry !== null) this.#retry = { ...this.#retry, nextAttemptAt: Date.now() + wait };
      try {
        await delay(wait, undefined, { signal: this.#wake.signal });
      } catch {
        return;
      }
      if (!this.#in(SupervisorPhase.retrying)) return;
      if (this.#retry !== null) this.#retry = { ...this.#retry, nextAttemptAt: null };
      try {
        await this.#launch(false);
      } catch (err) {
        if (!this.#in(SupervisorPhase.launching)) return;
        this.#retryAfter(err);
        this.#logFailure(err, 'endpoint pipeline could not restart; retrying');
      }
    }
  }
}

function failureOf(err: unknown): { code: string; message: string } {
  return { code: SluiceError.isInstance(err) ? err.code : 'INTERNAL', message: (err as Error).message };
}
