import { randomUUID } from 'node:crypto';
import { type OwnerIdentity, QueueFullError, type TransferRequest } from '@sluice/core';
import type { CoordinatorOptions } from './context.js';
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
 * Fire-and-forget requests: never in the store, run on the receiving node with bounded concurrency; lost if
 * the node dies (docs/architecture.md § Protocol 1). Their checkpoint lives in memory, their epoch is 0 (unfenced),
 * and each run writes as a writer of its own ({@link fireAndForgetWriter}).
 */
export class FireAndForget {
  readonly #o: CoordinatorOptions;
  readonly #scheduler: Scheduler;
  /** Each accepted run (queued or running) that has not ended: its abort controller, by transfer id. */
  readonly #controllers = new Map<AbortController, string>();

  constructor(options: CoordinatorOptions) {
    this.#o = options;
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
    this.#scheduler.start(ticket, async () => {
      let checkpoint: unknown | null = null;
      try {
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
      }
    });
    this.#o.metrics.submits.inc({ outcome: 'fire-and-forget' });
    return {
      outcome: 'accepted',
      id: runnable.id,
      owner: { nodeId: identity.nodeId, address: identity.address },
    };
  }

  /** Removes what this run (`writer`) staged, and nothing of another run with the same id. */
  async #discard(runnable: TransferRequest, writer: string): Promise<void> {
    try {
      await this.#o.discard?.(runnable, writer);
    } catch (err) {
      this.#o.logger.warn({ transferId: runnable.id, err }, 'could not remove what the transfer left behind');
    }
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
