/**
 * Turns the row messages of one source transaction (pgoutput `Insert`/`Update`/`Delete`/`Truncate` between a
 * `Begin` and its `Commit`) into the pipeline's record operations, in parts of at most `batchSize` operations.
 * The replication source's stream loop (`stream-read.ts`) owns the stream, the position and the commit cadence; this
 * module owns what a change means for the cache — the one place a row message becomes an upsert or a delete.
 * A table with `REPLICA IDENTITY FULL` may have a key two rows hold inside a transaction (a `DEFERRABLE` one): its
 * changes go through {@link TransactionKeys}, which tells the sink each key's net effect.
 * See docs/architecture.md § PostgreSQL change data capture.
 */
import type { Pgoutput } from 'pg-logical-replication';
import type { BadRecordReport } from '../../bad-records.js';
import type { RecordLocation, RecordOp, Row } from '../../ops.js';
import { ownField, setOwnField } from '../../own.js';
import type { SourceBatch } from '../../types.js';
import { TransactionKeys, type UpsertOp } from './key-rows.js';

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
  /** Changes read since the last part (a key change counts as its delete and its upsert). */
  read: number;
  truncate: boolean;
  /** Whether a truncate of the table came in this transaction (everything before it is gone). */
  emptied: boolean;
  /** The keys it touched, once a change of a table whose key two rows may hold came (else null: blind writes). */
  keys: TransactionKeys | null;
  /** Its commit LSN (or xid): with `seq`, the position each operation reports. */
  id: string;
  /** Its xid: what a partial upsert names, so the values it lacks are read once the transaction is visible. */
  xid: string;
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
      read: 0,
      truncate: false,
      emptied: false,
      keys: null,
      id: message.commitLsn ?? `x${message.xid}`,
      xid: String(message.xid),
      seq: 0,
      changed: false,
    };
  }

  /**
   * Adds a row change of the open transaction. Returns true once the part reached `batchSize` operations (the
   * caller then takes it as an open part, so a transaction is handed on while it is read).
   */
  change(message: RowMessage, batchSize: number): boolean {
    const txn = this.#txn;
    if (txn === null || !this.table.ours(message.relation)) return false;
    txn.changed = true;
    const at = { source: this.table.handle, position: `${txn.id}:${txn.seq++}` };
    // Only under REPLICA IDENTITY FULL can the key be one PostgreSQL checks late (a deferrable key is no identity):
    // from the first such change on, the transaction's changes are resolved per key.
    if (txn.keys === null && message.relation.replicaIdentity === 'full')
      // Pushes to the part being assembled (`txn.ops` is replaced by each part taken).
      txn.keys = new TransactionKeys((op) => txn.ops.push(op), { emptied: txn.emptied });
    if (txn.keys !== null) this.#resolve(txn, txn.keys, message, at);
    else this.#write(txn, message, at);
    return txn.ops.length >= batchSize;
  }

  /** A change as blind writes by key, in stream order (the key is unique at every moment). */
  #write(txn: OpenTransaction, message: RowMessage, at: RecordLocation): void {
    if (message.tag === 'delete') {
      const key = this.#keyOf(message.key ?? message.old);
      txn.read++;
      if (key === null) txn.bad.push({ ...at, reason: 'a delete without its key columns' });
      else txn.ops.push({ op: 'delete', key, at });
      return;
    }
    const { record, missing } = toRecord(message.new);
    if (missing !== null && message.tag === 'insert') {
      // An insert always carries every value; a column without one is a protocol surprise, never a guess.
      txn.read++;
      txn.bad.push({ ...at, reason: `an insert without value(s) of ${missing.join(', ')}` });
      return;
    }
    // An unchanged TOASTed value is not sent (unless the replica identity is FULL): the op says which columns keep
    // their previous value, and a sink that holds the previous record (the cache) fills them in; any other refuses it.
    if (message.tag === 'update') {
      // A changed primary key: the record under the old key goes.
      const before = this.#keyOf(message.key ?? message.old);
      const after = this.#keyOf(record);
      if (before !== null && !sameKey(before, after)) {
        const gone = { op: 'delete' as const, key: before, at: { ...at, position: `${at.position}:old` } };
        txn.read += 2;
        if (missing === null) txn.ops.push(gone, { op: 'upsert', record, at });
        // Unchanged values come from the record under the old key: taken before that record goes.
        else
          txn.ops.push(
            { op: 'upsert', record, unchanged: missing, from: before, transaction: txn.xid, at },
            gone,
          );
        return;
      }
    }
    txn.read++;
    txn.ops.push(
      missing === null
        ? { op: 'upsert', record, at }
        : { op: 'upsert', record, unchanged: missing, transaction: txn.xid, at },
    );
  }

  /**
   * A change as what it does to the rows behind each key: a removal takes the row its whole old tuple names, a new
   * row is placed under its key, and the sink hears of a key once it is settled (see {@link TransactionKeys}).
   */
  #resolve(txn: OpenTransaction, keys: TransactionKeys, message: RowMessage, at: RecordLocation): void {
    const old = message.tag === 'insert' ? null : message.old;
    const oldRecord = old === null ? null : toRecord(old).record;
    if (message.tag === 'delete') {
      const key = this.#keyOf(message.key ?? old);
      txn.read++;
      if (key === null) txn.bad.push({ ...at, reason: 'a delete without its key columns' });
      else keys.remove(key, oldRecord === null ? null : JSON.stringify(oldRecord), at);
      return;
    }
    // The values an update left unchanged (TOASTed, not sent) are the old row's, which FULL sends whole.
    const { record, missing } = toRecord(message.new, oldRecord);
    if (missing !== null && message.tag === 'insert') {
      txn.read++;
      txn.bad.push({ ...at, reason: `an insert without value(s) of ${missing.join(', ')}` });
      return;
    }
    const after = this.#keyOf(record);
    /** The key the row left, when an update moved it (its unchanged values are that record's). */
    let from: unknown[] | null = null;
    if (message.tag === 'update') {
      // The row leaves its old key (the same one, for an update that keeps it): the old tuple names it.
      const before = this.#keyOf(message.key ?? old) ?? after;
      if (before !== null && !sameKey(before, after)) from = before;
      txn.read += from === null ? 1 : 2;
      if (before !== null)
        keys.remove(before, oldRecord === null ? null : JSON.stringify(oldRecord), {
          ...at,
          position: `${at.position}:old`,
        });
    } else txn.read++;
    // Still partial only when the old row lacked the values too (never seen: FULL sends it whole).
    const op: UpsertOp =
      missing === null
        ? { op: 'upsert', record, at }
        : {
            op: 'upsert',
            record,
            unchanged: missing,
            ...(from === null ? {} : { from }),
            transaction: txn.xid,
            at,
          };
    // A row without its key values: the run reports it (a record lacking its primary key is a bad record).
    if (after === null) txn.ops.push(op);
    else keys.place(after, op, JSON.stringify(record));
  }

  /** A truncate of the open transaction: if it names the table, everything the transaction did before goes too. */
  truncate(message: Pgoutput.MessageTruncate): void {
    const txn = this.#txn;
    if (txn === null || !message.relations.some((r) => r !== undefined && this.table.ours(r))) return;
    // The sink empties what it staged of this transaction, and the endpoint.
    txn.ops = [];
    txn.truncate = true;
    txn.emptied = true;
    txn.keys?.truncate();
    txn.changed = true;
  }

  /** Operations ready to be taken (after {@link settle}, every one the transaction has left). */
  get pending(): number {
    return this.#txn?.ops.length ?? 0;
  }

  /**
   * At the commit: the rows that waited for their key to settle (a row placed on a key its original may still have
   * held) join the operations to take. A part taken before this is never the transaction's last.
   */
  settle(): void {
    this.#txn?.keys?.settle();
  }

  /**
   * What the open transaction changed since its last part (at most `limit` operations), as a batch at `position`:
   * `open` while the transaction continues (the sink must not commit between its parts), `flush` to commit right
   * after it.
   */
  take(
    position: unknown,
    part: { open?: boolean; flush?: boolean; end?: boolean; limit?: number } = {},
  ): SourceBatch {
    const txn = this.#txn;
    if (txn === null) throw new Error('no open transaction to take a part of');
    const ops =
      part.limit !== undefined && txn.ops.length > part.limit ? txn.ops.splice(0, part.limit) : txn.ops;
    const out: SourceBatch = {
      kind: 'records',
      ops,
      read: txn.read,
      bad: txn.bad,
      position,
      ...(part.open ? { open: true } : {}),
      ...(part.flush ? { flush: true } : {}),
      ...(part.end && txn.changed ? { transactionEnd: true } : {}),
      ...(txn.truncate ? { truncate: true } : {}),
    };
    if (ops === txn.ops) txn.ops = [];
    txn.bad = [];
    txn.read = 0;
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
 * A lacking column's value is taken from `previous` (the old row, under `REPLICA IDENTITY FULL`) when it has one;
 * the record keeps the tuple's column order either way.
 */
function toRecord(
  tuple: Record<string, unknown>,
  previous: Row | null = null,
): { record: Row; missing: string[] | null } {
  const record: Row = {};
  let missing: string[] | null = null;
  for (const name in tuple) {
    let value = tuple[name];
    if (value === undefined && previous !== null) value = ownField(previous, name);
    if (value === undefined) {
      missing ??= [];
      missing.push(name);
      continue;
    }
    setOwnField<unknown>(record, name, value);
  }
  return { record, missing };
}
