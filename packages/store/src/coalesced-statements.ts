/**
 * The store's hot statements coalesced on PostgreSQL — lookups by id, submits, checkpoint saves and transitions:
 * concurrent calls become one statement over `unnest(…)` arrays in which every row keeps its own conditions (a
 * submit's `ON CONFLICT DO NOTHING`; a write's fence: `id`, `epoch`, legal from-states), so a batch does exactly
 * what the same calls would have done one by one, in one round trip and one commit (packages/store/README.md
 * § Coalesced statements). SQLite is in-process with one writer and keeps one statement per call.
 */
import { ACTIVE_STATES, canTransition, isTerminal, TERMINAL_STATES, type TransferState } from '@sluice/core';
import { CompiledQuery, type Kysely } from 'kysely';
import { Coalescer, type Settled } from './coalescer.js';
import { isUnavailableError } from './errors.js';
import type { StoreDatabase, TransferRow } from './schema.js';
import { storeClock } from './store-clock.js';
import type { SubmitValues } from './submit-input.js';

/** What a coalesced submit returns: the row, and whether this statement inserted it. */
export type SubmittedRow = TransferRow & { created: number };

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
 * const writes = new CoalescedStatements(db, statements);
 * const saved = await writes.checkpoint({ id: 'orders-1', epoch: 3, checkpoint: '{"line":10}', leaseMs: 30_000 });
 * const row = await writes.transition('COMPLETED', { id: 'orders-1', epoch: 3, error: null, result: '{}' });
 * ```
 */
export class CoalescedStatements {
  readonly #db: Kysely<StoreDatabase>;
  readonly #lookups: Coalescer<string, TransferRow | undefined>;
  #lookupSeq = 0;
  readonly #submits: Coalescer<SubmitValues, SubmittedRow | undefined>;
  readonly #checkpoints: Coalescer<CheckpointWrite, boolean>;
  readonly #transitions = new Map<TransferState, Coalescer<TransitionWrite, TransferRow | undefined>>();

  constructor(db: Kysely<StoreDatabase>, statements?: { register(sql: string): void }) {
    this.#db = db;
    const now = storeClock('postgres').now.compile(db).sql;
    const lookupSql = `select * from "transfers" where "id" = any($1::text[])`;
    statements?.register(lookupSql);
    this.#lookups = this.#coalescer(
      async (ids) => {
        const byId = new Map((await this.#rows(lookupSql, [[...ids]])).map((row) => [row.id, row]));
        return ids.map((id) => byId.get(id));
      },
      // Reads of one id may share a batch (one row answers them all): many callers resending one request must
      // not queue behind each other one batch at a time.
      () => `lookup-${++this.#lookupSeq}`,
    );
    // Inserts what is new; for an id that exists, returns the stored row (created 0). A row inserted by another
    // statement after this one's snapshot is in neither branch: its caller reads it (store.ts).
    const submitSql = `with v as (
  select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[])
    as v(id, hash, request, state, node_id, address, instance, lease_ms)
), ins as (
  insert into "transfers" ("id", "request_hash", "request", "state", "owner_node_id", "owner_address",
    "owner_instance", "epoch", "lease_expires_at", "attempts", "error", "result", "checkpoint", "created_at", "updated_at")
  select v.id, v.hash, v.request, v.state, v.node_id, v.address, v.instance, 1, ${now} + v.lease_ms, 1,
    null, null, null, ${now}, ${now}
  from v
  on conflict ("id") do nothing
  returning *
)
select 1 as "created", ins.* from ins
union all
select 0 as "created", t.* from "transfers" as t join v on t."id" = v.id
where not exists (select 1 from ins where ins."id" = v.id)`;
    statements?.register(submitSql);
    this.#submits = this.#coalescer(
      async (items) => {
        const rows = await this.#rows<SubmittedRow>(submitSql, [
          items.map((w) => w.id),
          items.map((w) => w.hash),
          items.map((w) => w.request),
          items.map((w) => w.state),
          items.map((w) => w.nodeId),
          items.map((w) => w.address),
          items.map((w) => w.instance),
          items.map((w) => w.leaseMs),
        ]);
        const byId = new Map(rows.map((row) => [row.id, row]));
        return items.map((w) => byId.get(String(w.id)));
      },
      (w) => String(w.id),
    );
    // A checkpoint that moved resets the count of retryable failures (queries.ts, progressResetsRetries).
    const checkpointSql = `update "transfers" as t set "checkpoint" = v.checkpoint, "updated_at" = ${now},
  "retries" = case when t."checkpoint" is distinct from v.checkpoint then 0 else t."retries" end,
  "lease_expires_at" = case when v.lease_ms is null then t."lease_expires_at" else ${now} + v.lease_ms end
from unnest($1::text[], $2::integer[], $3::text[], $4::bigint[]) as v(id, epoch, checkpoint, lease_ms)
where t."id" = v.id and t."epoch" = v.epoch and t."state" in (${list(ACTIVE_STATES as TransferState[])})
returning t."id"`;
    statements?.register(checkpointSql);
    this.#checkpoints = this.#coalescer(async (items) => {
      const saved = await this.#rows<{ id: string }>(checkpointSql, [
        items.map((w) => w.id),
        items.map((w) => w.epoch),
        items.map((w) => w.checkpoint),
        items.map((w) => w.leaseMs),
      ]);
      const ids = new Set(saved.map((row) => row.id));
      return items.map((w) => ids.has(w.id));
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

  /** The row of `id`, or undefined. */
  get(id: string): Promise<TransferRow | undefined> {
    return this.#lookups.add(id);
  }

  /**
   * Inserts the record unless its id exists: the inserted row (created 1), the existing one (created 0), or
   * undefined when another statement inserted it after this one's snapshot (read it again).
   */
  submit(values: SubmitValues): Promise<SubmittedRow | undefined> {
    return this.#submits.add(values);
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
  #coalescer<I, O>(
    run: (items: readonly I[]) => Promise<O[]>,
    keyOf: (item: I) => string = (item) => (item as { id: string }).id,
  ): Coalescer<I, O> {
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
    return new Coalescer(settle, { maxInFlight: MAX_IN_FLIGHT, maxBatch: MAX_BATCH, keyOf });
  }

  async #rows<R = TransferRow>(sqlText: string, parameters: unknown[][]): Promise<R[]> {
    const result = await this.#db.executeQuery<R>(CompiledQuery.raw(sqlText, parameters));
    return result.rows;
  }
}
