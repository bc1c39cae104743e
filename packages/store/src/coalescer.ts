/**
 * Group commit on the client side: writes that arrive while earlier ones are in flight wait and then go to the
 * database together, as one statement (one round trip, one commit). A write that finds nothing in flight goes at
 * once, so a quiet store adds no latency; under load the batches grow with the concurrency
 * (packages/store/README.md § Coalesced statements).
 */

/** One item's outcome in a batch: its value, or the error that only this item failed with. */
export type Settled<O> = { ok: true; value: O } | { ok: false; error: unknown };

/**
 * How a batch of items is run: one outcome per item, in the items' order. Throwing fails every item of the
 * batch with that error.
 */
export type RunBatch<I, O> = (items: readonly I[]) => Promise<readonly Settled<O>[]>;

export interface CoalescerOptions<I> {
  /** Batches running at once; more arrivals queue until one finishes. */
  maxInFlight: number;
  /** The most items of one batch. */
  maxBatch: number;
  /**
   * Items with the same key never share a batch (one statement must not update one row twice); the later one
   * waits for the next batch.
   */
  keyOf: (item: I) => string;
}

interface Pending<I, O> {
  item: I;
  resolve: (outcome: O) => void;
  reject: (err: unknown) => void;
}

/**
 * Runs items through `run` in batches: at most `maxInFlight` batches at a time, each of at most `maxBatch`
 * items with distinct keys. A batch that throws rejects each of its items with that error (the statement is all
 * or nothing, so none of them took effect).
 *
 * @example
 * ```ts
 * const saves = new Coalescer<Save, boolean>(async (items) => (await updateAll(items)).map((value) => ({ ok: true, value })), { maxInFlight: 2, maxBatch: 64, keyOf: (s) => s.id });
 * const saved = await saves.add({ id: 'orders-1', epoch: 3, checkpoint: '{"line":10}' });
 * ```
 */
export class Coalescer<I, O> {
  readonly #run: RunBatch<I, O>;
  readonly #options: CoalescerOptions<I>;
  readonly #queue: Pending<I, O>[] = [];
  #inFlight = 0;

  constructor(run: RunBatch<I, O>, options: CoalescerOptions<I>) {
    this.#run = run;
    this.#options = options;
  }

  /** Queues `item` and resolves with its outcome once the batch that carried it finished. */
  add(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.#queue.push({ item, resolve, reject });
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#inFlight < this.#options.maxInFlight && this.#queue.length > 0) {
      const batch = this.#take();
      this.#inFlight += 1;
      void this.#runBatch(batch);
    }
  }

  /** The next batch: queued items in arrival order, skipping (leaving queued) a key already taken. */
  #take(): Pending<I, O>[] {
    const batch: Pending<I, O>[] = [];
    const keys = new Set<string>();
    for (let i = 0; i < this.#queue.length && batch.length < this.#options.maxBatch; ) {
      const pending = this.#queue[i]!;
      const key = this.#options.keyOf(pending.item);
      if (keys.has(key)) {
        i += 1;
        continue;
      }
      keys.add(key);
      batch.push(pending);
      this.#queue.splice(i, 1);
    }
    return batch;
  }

  async #runBatch(batch: Pending<I, O>[]): Promise<void> {
    try {
      const outcomes = await this.#run(batch.map((p) => p.item));
      for (const [i, pending] of batch.entries()) {
        const outcome = outcomes[i];
        if (outcome?.ok) pending.resolve(outcome.value);
        else
          pending.reject(outcome ? outcome.error : new Error('the batch returned no outcome for this item'));
      }
    } catch (err) {
      for (const pending of batch) pending.reject(err);
    } finally {
      this.#inFlight -= 1;
      this.#pump();
    }
  }
}
