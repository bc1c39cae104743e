import { randomUUID } from 'node:crypto';
import { type OwnerIdentity, QueueFullError, SluiceError, type TransferRequest } from '@sluice/core';
import type { CoordinatorOptions } from './context.js';
import { FireAndForgetJournal, type JournalRead } from './fire-and-forget-journal.js';
import { Scheduler } from './scheduler.js';
import type { Submission } from './submission.js';

/** How long aborted runs get to end (and remove what they staged) before shutdown goes on without them. */
const ABORT_SETTLE_MS = 5_000;

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/**
 * The writer of one fire-and-forget run: its effects in the destination (temp files, sink checkpoint rows,
 * `Nats-Msg-Id`s) are its own. The id is the caller's and unrecorded, so a recorded transfer or another
 * fire-and-forget run may use it at the same time; sharing the transfer id's writer, the first run to clean up
 * removed the other's staged file (a running idempotent transfer then FAILED at publish).
 */
function fireAndForgetWriter(): string {
  return `fire-and-forget.${randomUUID()}`;
}

/**
 * Codes of a journal entry this node can no longer clean up whatever it retries: the configuration no longer lets it
 * reach the destination (a root or a connection removed since). Its entry goes, with a warning naming what is left.
 */
const UNREACHABLE_FOR_GOOD: ReadonlySet<string> = new Set([
  'PATH_NOT_ALLOWED',
  'UNKNOWN_CONNECTION',
  'UNSUPPORTED_ADDRESS_TYPE',
  'VALIDATION_FAILED',
]);

/**
 * Fire-and-forget requests: never in the store, run on the receiving node with bounded concurrency; lost if
 * the node dies (docs/architecture.md § Protocol 1). Their checkpoint lives in memory, their epoch is 0 (unfenced),
 * and each run writes as a writer of its own ({@link fireAndForgetWriter}). Each run is kept in the data directory's
 * journal until it removed what it staged, so what a run that died with its process left behind is removed by the
 * next process on that data directory ({@link FireAndForget.sweepLeftovers}, docs/fencing.md).
 */
export class FireAndForget {
  readonly #o: CoordinatorOptions;
  readonly #scheduler: Scheduler;
  readonly #journal: FireAndForgetJournal | null;
  /** Each accepted run (queued or running) that has not ended: its abort controller, by transfer id. */
  readonly #controllers = new Map<AbortController, string>();
  /** Writers of this process's runs whose journal entry is theirs to forget: a sweep leaves them alone. */
  readonly #liveWriters = new Set<string>();
  #sweeping: Promise<void> | null = null;

  constructor(options: CoordinatorOptions) {
    this.#o = options;
    this.#journal =
      options.fireAndForgetJournal !== undefined
        ? new FireAndForgetJournal(options.fireAndForgetJournal)
        : null;
    this.#scheduler = new Scheduler({
      concurrency: options.limits.fireAndForgetConcurrency,
      queueSize: options.limits.queueSize,
    });
  }

  get pending(): number {
    return this.#scheduler.running + this.#scheduler.queued;
  }

  /** Runs `runnable` (a request whose paths the caller confined) here, once, with nothing recorded. */
  submit(runnable: TransferRequest, identity: OwnerIdentity): Submission {
    const ticket = this.#scheduler.tryReserve();
    if (!ticket) {
      this.#o.metrics.submits.inc({ outcome: 'queue-full' });
      throw new QueueFullError(1);
    }
    const controller = new AbortController();
    this.#controllers.set(controller, runnable.id);
    const writer = fireAndForgetWriter();
    // Before anything can be journaled: from here on no sweep takes the run's entry for a dead run's.
    this.#liveWriters.add(writer);
    this.#scheduler.start(ticket, async () => {
      let checkpoint: unknown | null = null;
      try {
        await this.#record(runnable, writer, identity);
        const result = await this.#o.execute(runnable, {
          checkpoint: {
            epoch: 0,
            load: async () => checkpoint,
            save: async (next) => {
              checkpoint = next;
            },
            finishing: async () => {
              if (controller.signal.aborted) throw controller.signal.reason;
            },
          },
          signal: controller.signal,
          onProgress: () => {},
          writer,
        });
        this.#o.logger.info({ transferId: runnable.id, result }, 'fire-and-forget transfer completed');
        // Nothing resumes a fire-and-forget transfer: what its sink kept for resuming goes as well.
        await this.#discard(runnable, writer);
      } catch (err) {
        this.#o.logger.warn({ transferId: runnable.id, err }, 'fire-and-forget transfer did not complete');
        // Nothing resumes a fire-and-forget transfer: what it staged is garbage now.
        await this.#discard(runnable, writer);
      } finally {
        this.#controllers.delete(controller);
        this.#liveWriters.delete(writer);
      }
    });
    this.#o.metrics.submits.inc({ outcome: 'fire-and-forget' });
    return {
      outcome: 'accepted',
      id: runnable.id,
      owner: { nodeId: identity.nodeId, address: identity.address },
    };
  }

  /**
   * Journals the run before it writes anything. A journal that cannot be written does not stop the run (the
   * destination may be fine): only a crash of this process would then leave its leftovers for good.
   */
  async #record(runnable: TransferRequest, writer: string, identity: OwnerIdentity): Promise<void> {
    try {
      await this.#journal?.record({
        writer,
        nodeId: identity.nodeId,
        instanceId: identity.instanceId,
        startedAt: new Date().toISOString(),
        request: runnable,
      });
    } catch (err) {
      this.#o.logger.warn(
        { transferId: runnable.id, writer, err },
        'could not journal a fire-and-forget run: a crash would leave what it stages behind',
      );
    }
  }

  /**
   * Removes what this run (`writer`) staged, and nothing of another run with the same id; then its journal entry.
   * An entry whose leftovers could not be removed stays, for a later sweep to try again.
   */
  async #discard(runnable: TransferRequest, writer: string): Promise<void> {
    try {
      await this.#o.discard?.(runnable, writer);
    } catch (err) {
      this.#o.logger.warn({ transferId: runnable.id, err }, 'could not remove what the transfer left behind');
      return;
    }
    await this.#journal?.forget(writer).catch((err: unknown) => {
      this.#o.logger.warn({ transferId: runnable.id, writer, err }, 'could not forget a fire-and-forget run');
    });
  }

  /**
   * Removes what fire-and-forget runs that no longer run left in their destinations: the journal's entries no run of
   * this process owns. The data directory has one app-server at a time, so those runs died with an earlier process
   * on it (SIGKILL, a crash, a shutdown that gave up on them) or are this process's runs whose own clean-up failed —
   * never a live run, here or on a node sharing the destination (each run removes only its own writer's temp files
   * and checkpoint row). At most one pass at a time, of at most `JOURNAL_PASS_LIMIT` entries; an entry whose
   * destination cannot be reached now stays for the next pass. Never throws (a failure is logged).
   */
  sweepLeftovers(): Promise<void> {
    if (this.#journal === null) return Promise.resolve();
    this.#sweeping ??= this.#sweepOnce(this.#journal)
      .catch((err: unknown) => {
        this.#o.logger.warn({ err }, 'could not read the fire-and-forget journal');
      })
      .finally(() => {
        this.#sweeping = null;
      });
    return this.#sweeping;
  }

  async #sweepOnce(journal: FireAndForgetJournal): Promise<void> {
    for (const read of await journal.read()) {
      if (this.#liveWriters.has(read.writer)) continue;
      await this.#removeLeftovers(journal, read);
    }
  }

  async #removeLeftovers(journal: FireAndForgetJournal, { writer, entry }: JournalRead): Promise<void> {
    const { logger, identity } = this.#o;
    if (entry === null) {
      // Cut short by a crash while being written: its run had not started writing (it waits for the entry).
      logger.warn({ writer }, 'dropped an unreadable fire-and-forget journal entry');
      await journal.forget(writer);
      return;
    }
    const where = { transferId: entry.request.id, writer, destination: entry.request.destination };
    try {
      // Confined again: the roots and connections of today decide what this node may touch.
      const runnable = this.#o.policy.confine(entry.request, { access: false });
      await this.#o.discard?.(runnable, writer);
    } catch (err) {
      if (SluiceError.isInstance(err) && UNREACHABLE_FOR_GOOD.has((err as SluiceError).code)) {
        logger.warn(
          { ...where, err },
          'cannot remove what a fire-and-forget run left: this node may no longer reach its destination (remove it by hand)',
        );
        await journal.forget(writer);
        return;
      }
      logger.warn({ ...where, err }, 'could not remove what a fire-and-forget run left; will try again');
      return;
    }
    await journal.forget(writer);
    logger.info(
      { ...where, instanceId: entry.instanceId },
      entry.instanceId === identity.instanceId
        ? 'removed what an ended fire-and-forget run left'
        : 'removed what a fire-and-forget run of a previous life left',
    );
  }

  /**
   * Gives running work `graceMs`, then aborts what is left — and waits (up to {@link ABORT_SETTLE_MS}) for the
   * aborted runs to end, each removing what its sink staged: nothing resumes them, and a process that exited
   * first left their temporary files in the destination directories for good.
   */
  async drain(graceMs: number): Promise<void> {
    await Promise.race([this.#scheduler.idle(), delay(graceMs)]);
    if (this.#controllers.size === 0) return;
    this.#o.logger.warn(
      { transfers: [...this.#controllers.values()], graceMs },
      'fire-and-forget transfers abandoned at shutdown (nothing records or resumes them)',
    );
    for (const controller of this.#controllers.keys()) controller.abort();
    await Promise.race([this.#scheduler.idle(), delay(ABORT_SETTLE_MS)]);
  }
}
