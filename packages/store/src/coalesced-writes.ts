/**
 * The owner's hot writes — checkpoint saves and state transitions — coalesced on PostgreSQL: concurrent calls
 * become one `UPDATE … FROM unnest(…)` whose every row keeps its own fence (`id`, `epoch`, legal from-states),
 * so a batch changes exactly the rows the same calls would have changed one by one, in one round trip and one
 * commit (docs/store.md § Coalesced writes). SQLite is in-process with one writer and keeps one statement per
 * call.
 */
import { ACTIVE_STATES, canTransition, isTerminal, TERMINAL_STATES, type TransferState } from '@sluice/core';
import { CompiledQuery, type Kysely } from 'kysely';
import { Coalescer, type Settled } from './coalescer.js';
import { isUnavailableError } from './errors.js';
import type { StoreDatabase, TransferRow } from './schema.js';
import { storeClock } from './store-clock.js';

/** One checkpoint save; `leaseMs` null keeps the lease as it is. */
export interface CheckpointWrite {
  id: string;
  epoch: number;
  checkpoint: string;
  leaseMs: number | null;
}

/** One transition to the coalescer's target state. */
export interface TransitionWrite {
  id: string;
  epoch: number;
  error: string | null;
  result: string | null;
}

/** Batches running at once per kind of write; later calls queue and go together when one finishes. */
const MAX_IN_FLIGHT = 2;
/** The most rows of one statement (arrays of this size bind in well under a millisecond). */
const MAX_BATCH = 64;

/**
 * Whether a failed batch is run again one item at a time. Not when the database is unreachable or the statement
 * timed out (each retry would fail the same way, one after another); yes for a deadlock — a multi-row update can
 * deadlock with a concurrent heartbeat that locks the same rows in another order, where a one-row statement
 * cannot — and for any error one row may have caused.
 */
function worthRetryingAlone(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === '40P01' || code === '40001') return true;
  return code !== '57014' && !isUnavailableError(err);
}

const ALL_STATES = [...ACTIVE_STATES, ...TERMINAL_STATES] as TransferState[];
const list = (states: readonly TransferState[]) => states.map((s) => `'${s}'`).join(', ');

/**
 * The coalesced writers of one PostgreSQL store. `statements` registers each SQL text so pg sends it as a named
 * prepared statement, like the store's other statements.
 *
 * @example
 * ```ts
 * const writes = new CoalescedWrites(db, statements);
 * const saved = await writes.checkpoint({ id: 'orders-1', epoch: 3, checkpoint: '{"line":10}', leaseMs: 30_000 });
 * const row = await writes.transition('COMPLETED', { id: 'orders-1', epoch: 3, error: null, result: '{}' });
 * ```
 */
export class CoalescedWrites {
  readonly #db: Kysely<StoreDatabase>;
  readonly #checkpoints: Coalescer<CheckpointWrite, boolean>;
  readonly #transitions = new Map<TransferState, Coalescer<TransitionWrite, TransferRow | undefined>>();

  constructor(db: Kysely<StoreDatabase>, statements?: { register(sql: string): void }) {
    this.#db = db;
    const now = storeClock('postgres').now.compile(db).sql;
    const checkpointSql = `update "transfers" as t set "checkpoint" = v.checkpoint, "updated_at" = ${now},
  "lease_expires_at" = case when v.lease_ms is null then t."lease_expires_at" else ${now} + v.lease_ms end
from unnest($1::text[], $2::integer[], $3::text[], $4::bigint[]) as v(id, epoch, checkpoint, lease_ms)
where t."id" = v.id and t."epoch" = v.epoch and t."state" in (${list(ACTIVE_STATES as TransferState[])})
returning t."id"`;
    statements?.register(checkpointSql);
    this.#checkpoints = this.#coalescer(async (items) => {
      const saved = await this.#ids(checkpointSql, [
        items.map((w) => w.id),
        items.map((w) => w.epoch),
        items.map((w) => w.checkpoint),
        items.map((w) => w.leaseMs),
      ]);
      return items.map((w) => saved.has(w.id));
    });
    for (const to of ALL_STATES) {
      const from = ALL_STATES.filter((state) => canTransition(state, to));
      if (from.length === 0) continue; // nothing leads there (RECEIVED): always illegal
      // A final record holds no lease: nobody may recover or heartbeat it.
      const lease = isTerminal(to) ? `, "lease_expires_at" = null` : '';
      const transitionSql = `update "transfers" as t set "state" = '${to}', "error" = v.error, "result" = v.result,
  "updated_at" = ${now}${lease}
from unnest($1::text[], $2::integer[], $3::text[], $4::text[]) as v(id, epoch, error, result)
where t."id" = v.id and t."epoch" = v.epoch and t."state" in (${list(from)})
returning t.*`;
      statements?.register(transitionSql);
      this.#transitions.set(
        to,
        this.#coalescer(async (items) => {
          const rows = await this.#rows(transitionSql, [
            items.map((w) => w.id),
            items.map((w) => w.epoch),
            items.map((w) => w.error),
            items.map((w) => w.result),
          ]);
          const byId = new Map(rows.map((row) => [row.id, row]));
          return items.map((w) => byId.get(w.id));
        }),
      );
    }
  }

  /** Saves a checkpoint if `epoch` still owns the active record; false when the fence refused it. */
  checkpoint(write: CheckpointWrite): Promise<boolean> {
    return this.#checkpoints.add(write);
  }

  /** Moves the record to `to` if `epoch` owns it and the move is legal; the new row, or undefined if refused. */
  transition(to: TransferState, write: TransitionWrite): Promise<TransferRow | undefined> | undefined {
    return this.#transitions.get(to)?.add(write);
  }

  /**
   * A coalescer over `run`. A batch that fails for a reason one row may have caused (a trigger or constraint
   * refusing it, a deadlock) is run again one item at a time, so only the item at fault fails — what the same
   * calls made one by one would have seen.
   */
  #coalescer<I extends { id: string }, O>(run: (items: readonly I[]) => Promise<O[]>): Coalescer<I, O> {
    const settle = async (items: readonly I[]): Promise<Settled<O>[]> => {
      try {
        return (await run(items)).map((value) => ({ ok: true, value }));
      } catch (err) {
        if (items.length === 1 || !worthRetryingAlone(err)) throw err;
        const alone: Settled<O>[] = [];
        for (const item of items) {
          try {
            alone.push({ ok: true, value: (await run([item]))[0] as O });
          } catch (error) {
            alone.push({ ok: false, error });
          }
        }
        return alone;
      }
    };
    return new Coalescer(settle, {
      maxInFlight: MAX_IN_FLIGHT,
      maxBatch: MAX_BATCH,
      keyOf: (item) => item.id,
    });
  }

  async #rows(sqlText: string, parameters: unknown[][]): Promise<TransferRow[]> {
    const result = await this.#db.executeQuery<TransferRow>(CompiledQuery.raw(sqlText, parameters));
    return result.rows;
  }

  async #ids(sqlText: string, parameters: unknown[][]): Promise<Set<string>> {
    const rows = (await this.#db.executeQuery<{ id: string }>(CompiledQuery.raw(sqlText, parameters))).rows;
    return new Set(rows.map((row) => row.id));
  }
}
