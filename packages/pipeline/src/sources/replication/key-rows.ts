/**
 * The net effect of one source transaction per record key, for a table whose key two rows may hold at once inside a
 * transaction. A `DEFERRABLE` unique key is checked only at the end of the statement (or at commit): `UPDATE t SET
 * id = id + 1` moves row 1 onto key 2 while row 2 still holds it, and the removal of old key 2 streams after that.
 * Applied as blind writes by key, that removal would delete the row just placed there. Here each key keeps the rows
 * behind it — the one it held before the transaction, and the ones the transaction placed under it — and a removal
 * takes the row it names (by its whole old row, which `REPLICA IDENTITY FULL` sends), so the sink is told a key's
 * record only once it is settled: any order of moves inside one transaction ends with each key holding the record
 * the table holds at commit.
 */
import type { RecordLocation, RecordOp } from '../../ops.js';

/** An upsert the transaction decided for a key. */
export type UpsertOp = Extract<RecordOp, { op: 'upsert' }>;

/** A row the open transaction placed under a key (an insert, or an update's new row). */
interface PlacedRow {
  /** The op that writes it; dropped once the sink was told (it is never needed again, see `KeyRows.told`). */
  op: UpsertOp | null;
  /** Its values as JSON text (the tuple's column order), to tell it from the other rows of its key. */
  content: string;
}

/** Whether the row a key held before the transaction (if it held one: the sink knows) is still there. */
const Original = { kept: 'kept', removed: 'removed' } as const;
type Original = (typeof Original)[keyof typeof Original];

/** One key the open transaction touched, and the rows behind it. */
interface KeyRows {
  key: unknown[];
  original: Original;
  /** Rows placed under the key and not removed since, oldest first. */
  placed: PlacedRow[];
  /**
   * What the sink was last told of the key: a placed row, `delete`, or nothing yet. Nothing is told while the
   * original is kept (the sink holds it, or holds nothing — an insert of a new key), so the sink never has to be
   * told to bring an original back.
   */
  told: PlacedRow | 'delete' | null;
  /** Where the last removal was read: the position of the delete the sink is told. */
  removedAt: RecordLocation;
}

/**
 * The keys one transaction touched. Ops for the sink are handed to `emit` as soon as a key is settled — its original
 * removed and at most one placed row left — so a transaction that updates rows in place streams on as before; a row
 * placed on a key whose original may still be there waits until that original goes, or until the commit.
 *
 * @example
 * ```ts
 * const keys = new TransactionKeys((op) => ops.push(op));
 * keys.remove([1], '{"id":1,"v":"a"}', at);          // row 1 moves…
 * keys.place([2], upsertOf({ id: 2, v: 'a' }), '{"id":2,"v":"a"}'); // …onto key 2, still held: waits
 * keys.remove([2], '{"id":2,"v":"b"}', at2);         // row 2 moves on: key 2 is settled → upsert {id: 2, v: 'a'}
 * keys.settle();                                     // at the commit: every key still waiting
 * ```
 */
export class TransactionKeys {
  readonly #keys = new Map<string, KeyRows>();
  /** Keys with a row placed and not yet told: settled at the latest by {@link settle}. */
  readonly #waiting = new Set<KeyRows>();
  /** A truncate of the table emptied it: keys not touched since held nothing before. */
  #emptied = false;

  /** `emptied`: a truncate of the table came earlier in the transaction. */
  constructor(
    private readonly emit: (op: RecordOp) => void,
    options: { emptied?: boolean } = {},
  ) {
    this.#emptied = options.emptied ?? false;
  }

  /** The row of `op` (its values as `content`) now holds `key`. */
  place(key: unknown[], op: UpsertOp, content: string): void {
    const rows = this.#rows(key, op.at);
    rows.placed.push({ op, content });
    this.#tell(rows);
  }

  /**
   * A row of `key` is gone (a delete, or an update that moved it to another key). `content` is its whole old row
   * when the stream sent it (`REPLICA IDENTITY FULL`): the placed row with those values goes, else the original.
   */
  remove(key: unknown[], content: string | null, at: RecordLocation): void {
    const rows = this.#rows(key, at);
    rows.removedAt = at;
    const index =
      content !== null
        ? rows.placed.findLastIndex((row) => row.content === content)
        : // Only the key: the table's identity is a unique index checked at once (never a deferrable one), so one
          // row at most holds the key at any moment — a placed one if there is one.
          rows.placed.length - 1;
    if (index >= 0) rows.placed.splice(index, 1);
    else if (rows.original === Original.kept) rows.original = Original.removed;
    // A whole old row the transaction never placed, with the original gone: a key two rows held before the
    // transaction (no unique constraint on it). The newest placed row goes, as blind writes by key would have it.
    else rows.placed.pop();
    this.#tell(rows);
  }

  /** At the commit: every key still waiting is told its last placed row (the table's key is unique again). */
  settle(): void {
    for (const rows of this.#waiting) {
      const last = rows.placed.at(-1);
      if (last !== undefined && rows.told !== last) {
        this.emit(last.op!);
        rows.told = last;
        last.op = null;
      }
    }
    this.#waiting.clear();
  }

  /** A truncate of the table: every row before it is gone, in the sink too. */
  truncate(): void {
    this.#keys.clear();
    this.#waiting.clear();
    this.#emptied = true;
  }

  #rows(key: unknown[], at: RecordLocation | undefined): KeyRows {
    const id = JSON.stringify(key);
    let rows = this.#keys.get(id);
    if (rows === undefined) {
      rows = {
        key,
        original: this.#emptied ? Original.removed : Original.kept,
        placed: [],
        // After a truncate the sink deletes every key (staged ones too): nothing to tell until a row is placed.
        told: this.#emptied ? 'delete' : null,
        removedAt: at ?? { source: '' },
      };
      this.#keys.set(id, rows);
    }
    return rows;
  }

  /** Tells the sink the key's record once it is settled; a key two rows hold waits. */
  #tell(rows: KeyRows): void {
    const settled = rows.original === Original.removed && rows.placed.length <= 1;
    if (!settled) {
      if (rows.placed.length > 0) this.#waiting.add(rows);
      else this.#waiting.delete(rows);
      return;
    }
    this.#waiting.delete(rows);
    const now = rows.placed[0] ?? 'delete';
    if (rows.told === now) return;
    rows.told = now;
    if (now === 'delete') this.emit({ op: 'delete', key: rows.key, at: rows.removedAt });
    else {
      this.emit(now.op!);
      now.op = null;
    }
  }
}
