import { SinkError } from '@sluice/core';
import type pg from 'pg';
import { connectPostgres, createTableIfAbsent } from '../pg.js';

/** Writer → highest epoch that wrote, in the destination database: the fencing token checked where data lands. */
export const SINK_FENCE_TABLE = 'sluice_sink_fences';
/** Its columns: the writer (transfer id, or a fire-and-forget run's own) and the highest epoch that wrote. */
export const SINK_FENCE_COLUMNS = 'writer text PRIMARY KEY, epoch bigint NOT NULL';

/** The fence (and checkpoint) row's name of a sink: its transfer id and its DAG handle. */
export function fenceWriter(writerId: string, handle: string): string {
  return `${writerId}:${handle}`;
}

/**
 * Advances `writer`'s fence row to `epoch` inside the caller's open transaction; false when a higher epoch holds
 * it (the caller is stale). The row stays locked until that transaction ends, so a writer still inside a
 * transaction of its own makes this wait for its COMMIT or its end, and no two epochs' transactions interleave.
 */
export async function advanceFence(client: pg.Client, writer: string, epoch: number): Promise<boolean> {
  const r = await client.query(
    `INSERT INTO ${SINK_FENCE_TABLE} AS fence (writer, epoch) VALUES ($1, $2)
     ON CONFLICT (writer) DO UPDATE SET epoch = EXCLUDED.epoch WHERE fence.epoch <= EXCLUDED.epoch
     RETURNING fence.epoch`,
    [writer, epoch],
  );
  return (r.rowCount ?? 0) > 0;
}

/** A fence row held at a new epoch in an open transaction: `commit` makes it stick, `release` leaves it as it was. */
export interface PostgresFenceHold {
  commit(): Promise<void>;
  release(): Promise<void>;
}

export interface HoldPostgresFenceOptions {
  url: string;
  /** The sink's fence row ({@link fenceWriter}). */
  writer: string;
  epoch: number;
  /** How long to wait for a stale writer's open transaction (ms). Default 30 000, as the sink's own sessions. */
  lockTimeoutMs?: number;
}

/**
 * Takes a PostgreSQL sink's fence row at `epoch` in a transaction left open, for a node that changes a transfer's
 * owner *without* writing to the destination (a terminate of a transfer whose owner is gone): the hold waits out a
 * stale owner's open sink transaction (its COMMIT lands before, or its session ends), and once committed every
 * later transaction of an older epoch is refused where it lands. Held open while the store decides, so a refused
 * decision (`release`) leaves a live owner's fence untouched.
 *
 * @example
 * ```ts
 * const hold = await holdPostgresFence({ url, writer: fenceWriter('t1', 't1.sink'), epoch: record.epoch + 1 });
 * try { await store.terminateAbandoned('t1', record.epoch, identity); } catch (err) { await hold.release(); throw err; }
 * await hold.commit();
 * ```
 */
export async function holdPostgresFence(options: HoldPostgresFenceOptions): Promise<PostgresFenceHold> {
  let client: pg.Client | null = null;
  try {
    client = await connectPostgres(options.url);
    // The idle timeout ends the hold if this process stops between the store's answer and the commit.
    await client.query(
      `SELECT set_config('lock_timeout', $1, false), set_config('idle_in_transaction_session_timeout', '10000ms', false)`,
      [`${Math.max(0, Math.floor(options.lockTimeoutMs ?? 30_000))}ms`],
    );
    await createTableIfAbsent(client, SINK_FENCE_TABLE, SINK_FENCE_COLUMNS);
    await client.query('BEGIN');
    // A higher epoch already there fences every writer this hold would: nothing to add, nothing to undo.
    await advanceFence(client, options.writer, options.epoch);
  } catch (err) {
    await client?.end().catch(() => {});
    throw new SinkError(`cannot take the fence of ${options.writer}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const held = client;
  const end = async (statement: 'COMMIT' | 'ROLLBACK') => {
    try {
      await held.query(statement);
    } catch (err) {
      throw new SinkError(
        `cannot ${statement.toLowerCase()} the fence of ${options.writer}: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    } finally {
      await held.end().catch(() => {});
    }
  };
  return { commit: () => end('COMMIT'), release: () => end('ROLLBACK') };
}
