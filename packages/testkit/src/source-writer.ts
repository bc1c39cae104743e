import { sql } from './postgres.js';

/** The rows one source transaction touches: it updates `updates`, inserts `added` and deletes `removed`. */
export interface SourceTransaction {
  readonly updates: readonly number[];
  readonly added: number;
  readonly removed: number;
}

export interface SourceWriterOptions {
  /** Ids of the rows the table starts with: 1…`initialRows` (default 300). */
  initialRows?: number;
  /** The first id an insert uses (default 1 000, above the initial rows). */
  firstNewId?: number;
  /** Pause between two transactions, ms (default 5). */
  pauseMs?: number;
  /** The SQL of one transaction (one statement: a `DO` block keeps its rows in one transaction). */
  transaction: (rows: SourceTransaction) => string;
}

/** A running writer of source transactions; dispose (or `stop`) ends it. */
export interface SourceWriter extends AsyncDisposable {
  /** Transactions committed so far. */
  readonly written: number;
  /** Stops after the transaction in flight; rejects with the writer's error if one failed. */
  stop(): Promise<void>;
}

/**
 * Writes source transactions of several rows each (three updates of live rows, one insert, one delete of a live
 * row) until stopped — the load of the replication takeover and restart tests, where a replayed or split
 * transaction shows in per-key write counts ({@link perKeyWriteMismatches}).
 *
 * @example
 * ```ts
 * await using writer = startSourceWriter(url, {
 *   transaction: ({ updates, added, removed }) => `DO $$ BEGIN
 *     UPDATE items SET v = v + 1 WHERE id IN (${updates.join(', ')});
 *     INSERT INTO items VALUES (${added}, 0);
 *     DELETE FROM items WHERE id = ${removed};
 *   END $$`,
 * });
 * await waitFor(() => writer.written >= 40);
 * await writer.stop();
 * ```
 */
export function startSourceWriter(url: string, options: SourceWriterOptions): SourceWriter {
  const live = Array.from({ length: options.initialRows ?? 300 }, (_, i) => i + 1);
  let next = options.firstNewId ?? 1_000;
  let stopped = false;
  let written = 0;
  const pick = () => live[Math.floor(Math.random() * live.length)]!;
  const loop = (async () => {
    while (!stopped) {
      const updates = [pick(), pick(), pick()];
      const removed = live.splice(Math.floor(Math.random() * live.length), 1)[0]!;
      const added = next++;
      live.push(added);
      await sql(url, options.transaction({ updates, added, removed }));
      written++;
      await new Promise((resolve) => setTimeout(resolve, options.pauseMs ?? 5));
    }
  })();
  // A failure is reported by stop(); until then it must not be an unhandled rejection.
  loop.catch(() => {});
  const stop = async () => {
    stopped = true;
    await loop;
  };
  return {
    get written() {
      return written;
    },
    stop,
    async [Symbol.asyncDispose]() {
      await stop().catch(() => {});
    },
  };
}
