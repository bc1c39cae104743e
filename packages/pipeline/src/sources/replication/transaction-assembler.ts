/**
 * Turns the row messages of one source transaction (pgoutput `Insert`/`Update`/`Delete`/`Truncate` between a
 * `Begin` and its `Commit`) into the pipeline's record operations, in parts of at most `batchSize` operations.
 * The replication source's stream loop (`stream-read.ts`) owns the stream, the position and the commit cadence; this
 * module owns what a change means for the cache — the one place a row message becomes an upsert or a delete.
 * See docs/architecture.md § PostgreSQL change data capture.
 */
import type { Pgoutput } from 'pg-logical-replication';
import type { BadRecordReport } from '../../bad-records.js';
import type { RecordOp, Row } from '../../ops.js';
import { ownField, setOwnField } from '../../own.js';
import type { SourceBatch } from '../../types.js';

/** The table a replication source mirrors, as its read loop knows it. */
export interface MirroredTable {
  /** The source's handle (it tags every operation's `at`). */
  handle: string;
  /** The table as configured (for error reasons). */
  table: string;
  /** Primary-key columns, in key order. */
  keys: readonly string[];
  /** Whether a relation is this table (pgoutput streams every table of the publication). */
  ours(relation: Pgoutput.MessageRelation): boolean;
}

type RowMessage = Pgoutput.MessageInsert | Pgoutput.MessageUpdate | Pgoutput.MessageDelete;

/** The open transaction: what it changed since its last part, and whether it changed the table at all. */
interface OpenTransaction {
  ops: RecordOp[];
  bad: BadRecordReport[];
  truncate: boolean;
  /** Its commit LSN (or xid): with `seq`, the position each operation reports. */
  id: string;
  seq: number;
  changed: boolean;
}

/**
 * Assembles one source transaction at a time.
 *
 * @example
 * ```ts
 * const txn = new TransactionAssembler({ handle: 'pg', table: 'public.items', keys: ['id'], ours });
 * txn.begin(beginMessage);
 * if (txn.change(insertMessage, 500)) yield txn.take(position, { open: true });
 * const changed = txn.changed; // on Commit
 * yield txn.take(position, { flush: true });
 * txn.end();
 * ```
 */
export class TransactionAssembler {
  #txn: OpenTransaction | null = null;

  constructor(private readonly table: MirroredTable) {}

  /** Whether a transaction is open (between its `Begin` and its `Commit`). */
  get open(): boolean {
    return this.#txn !== null;
  }

  /** Whether the open transaction changed the mirrored table (a row change or a truncate). */
  get changed(): boolean {
    return this.#txn?.changed ?? false;
  }

  begin(message: Pgoutput.MessageBegin): void {
    this.#txn = {
      ops: [],
      bad: [],
      truncate: false,
      id: message.commitLsn ?? `x${message.xid}`,
      seq: 0,
      changed: false,
    };
  }

  /**
   * Adds a row change of the open transaction. Returns true once the part reached `batchSize` operations (the
   * caller then takes it as an open part, so a huge transaction is never held in memory whole).
   */
  change(message: RowMessage, batchSize: number): boolean {
    const txn = this.#txn;
    if (txn === null || !this.table.ours(message.relation)) return false;
    txn.changed = true;
    const at = { source: this.table.handle, position: `${txn.id}:${txn.seq++}` };
    if (message.tag === 'delete') {
      const key = this.#keyOf(message.key ?? message.old);
      if (key === null) txn.bad.push({ ...at, reason: 'a delete without its key columns' });
      else txn.ops.push({ op: 'delete', key, at });
      return txn.ops.length >= batchSize;
    }
    const { record, missing } = toRecord(message.new);
    if (missing !== null && message.tag === 'insert') {
      // An insert always carries every value; a column without one is a protocol surprise, never a guess.
      txn.bad.push({ ...at, reason: `an insert without value(s) of ${missing.join(', ')}` });
      return false;
    }
    // An unchanged TOASTed value is not sent (unless the replica identity is FULL): the op says which columns keep
    // their previous value, and a sink that holds the previous record (the cache) fills them in; any other refuses it.
    if (message.tag === 'update') {
      // A changed primary key: the record under the old key goes.
      const before = this.#keyOf(message.key ?? message.old);
      const after = this.#keyOf(record);
      if (before !== null && !sameKey(before, after)) {
        const gone = { op: 'delete' as const, key: before, at: { ...at, position: `${at.position}:old` } };
        if (missing === null) txn.ops.push(gone, { op: 'upsert', record, at });
        // Unchanged values come from the record under the old key: taken before that record goes.
        else txn.ops.push({ op: 'upsert', record, unchanged: missing, from: before, at }, gone);
        return txn.ops.length >= batchSize;
      }
    }
    txn.ops.push(
      missing === null ? { op: 'upsert', record, at } : { op: 'upsert', record, unchanged: missing, at },
    );
    return txn.ops.length >= batchSize;
  }

  /** A truncate of the open transaction: if it names the table, everything the transaction did before goes too. */
  truncate(message: Pgoutput.MessageTruncate): void {
    const txn = this.#txn;
    if (txn === null || !message.relations.some((r) => r !== undefined && this.table.ours(r))) return;
    // The sink empties what it staged of this transaction, and the endpoint.
    txn.ops = [];
    txn.truncate = true;
    txn.changed = true;
  }

  /**
   * What the open transaction changed since its last part, as a batch at `position`: `open` while the transaction
   * continues (the sink must not commit between its parts), `flush` to commit right after it.
   */
  take(position: unknown, part: { open?: boolean; flush?: boolean; end?: boolean } = {}): SourceBatch {
    const txn = this.#txn;
    if (txn === null) throw new Error('no open transaction to take a part of');
    const out: SourceBatch = {
      kind: 'records',
      ops: txn.ops,
      read: txn.ops.length + txn.bad.length,
      bad: txn.bad,
      position,
      ...(part.open ? { open: true } : {}),
      ...(part.flush ? { flush: true } : {}),
      ...(part.end && txn.changed ? { transactionEnd: true } : {}),
      ...(txn.truncate ? { truncate: true } : {}),
    };
    txn.ops = [];
    txn.bad = [];
    txn.truncate = false;
    return out;
  }

  /** Closes the open transaction (after its `Commit` and its last part). */
  end(): void {
    this.#txn = null;
  }

  /** The key of a tuple, or null when a key column is missing or null. */
  #keyOf(tuple: Record<string, unknown> | null): unknown[] | null {
    if (tuple === null) return null;
    const key = this.table.keys.map((k) => ownField(tuple, k));
    return key.some((v) => v === undefined || v === null) ? null : key;
  }
}

/** Two keys of one table (same length) hold equal values (parsed column values: JSON values, `textParser`'s). */
function sameKey(a: unknown[], b: unknown[] | null): boolean {
  if (b === null) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = b[i];
    if (x === y) continue;
    if (JSON.stringify(x) !== JSON.stringify(y)) return false;
  }
  return true;
}

/**
 * The tuple as a plain record (the parser's tuples have no prototype) without the columns it lacks, and their names
 * (an unchanged TOASTed value arrives as undefined) — one pass, no per-change arrays unless something is missing.
 */
function toRecord(tuple: Record<string, unknown>): { record: Row; missing: string[] | null } {
  const record: Row = {};
  let missing: string[] | null = null;
  for (const name in tuple) {
    const value = tuple[name];
    if (value === undefined) {
      missing ??= [];
      missing.push(name);
      continue;
    }
    setOwnField<unknown>(record, name, value);
  }
  return { record, missing };
}
