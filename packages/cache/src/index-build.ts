/**
 * Deferred index builds for from-scratch loads (docs/cache-index-build.md).
 *
 * Inserting a snapshot's index entries commit by commit into a B-tree that grows with every commit costs more
 * per record the larger the tree: an index whose keys arrive in random order (an index on `value`, say) dirties
 * nearly one page per entry, so each commit copies and writes most of the tree again, and LMDB holds every
 * dirty page of the commit in memory. A bulk commit (`commit(…, { bulk: true })` while the generation was empty
 * when the load began) writes its index entries instead as one sorted *run* per index, appended to the `runs`
 * database in the same transaction as the records (so a crash keeps runs and records consistent). Finishing
 * the build merges each index's runs in key order and appends the result to the index (`MDB_APPEND`: full
 * pages, no search), in bounded write transactions that yield to the event loop between them.
 *
 * While a build is pending (the `index-build` meta entry exists) the indexes are incomplete: plans use the
 * primary key only ({@link plannableDbs}), and any commit that is not a bulk one finishes the build first.
 */
import type { Database, Transaction } from 'lmdb';
import { putSucceeded } from './batch-write.js';
import { type CacheDbs, type IndexDb, indexKey } from './cache-dbs.js';
import { decodeRecord } from './record-json.js';

/** The meta entry that says a build is pending: how many runs were written, and whether any may be stale. */
export interface IndexBuildState {
  /** Runs written so far (run numbers `0 … runs - 1`). */
  runs: number;
  /**
   * A bulk commit replaced or deleted a record loaded before: some run entries describe versions that are
   * gone, so the merge keeps an entry only where the record's current version has that key in the index.
   */
  stale: boolean;
  /**
   * Run entries carry the record's bytes, so the merge copies them instead of reading each record from `data`
   * again. Absent in builds begun by versions whose runs held only the data key (their runs keep that form).
   */
  withBytes?: boolean;
  /**
   * The build began on a generation whose indexes already held the entries of its first records (a load that
   * outgrew `deferIndexesFrom`): the merge puts entries among them, without clearing the indexes or appending.
   * Absent in builds that began on an empty generation.
   */
  onto?: boolean;
}

/** The state of a build that begins now; `onto` when the indexes already hold entries (see {@link IndexBuildState}). */
export function newIndexBuild(onto = false): IndexBuildState {
  return { runs: 0, stale: false, withBytes: true, ...(onto ? { onto: true } : {}) };
}

export const INDEX_BUILD_KEY = 'index-build';
const RUNS_DB = 'index-runs';
/** Entries merged per write transaction (bounded dirty pages; the event loop runs between them). */
export const MERGE_CHUNK = 100_000;
const APPEND = { append: true };

/** The database holding pending runs (created at open in writable environments, never in a transaction). */
export function runsDb(dbs: CacheDbs): Database<Buffer, Buffer> {
  return dbs.env.db<Buffer, Buffer>(RUNS_DB, { keyEncoding: 'binary', encoding: 'binary' });
}

/** Creates the runs database (writable environments, at open). */
export function ensureRunsDb(dbs: CacheDbs): void {
  if (!dbs.env.readOnly) void runsDb(dbs);
}

/** The pending build, or null. Pass the read snapshot's transaction when there is one. */
export function pendingBuild(dbs: CacheDbs, transaction?: Transaction): IndexBuildState | null {
  const state = dbs.meta.get(INDEX_BUILD_KEY, transaction ? { transaction } : undefined) as
    | IndexBuildState
    | undefined;
  return state ?? null;
}

const withoutIndexes = new WeakMap<CacheDbs, CacheDbs>();

/**
 * The databases a query may plan over in this snapshot: all of them, or, while an index build is pending,
 * the same databases with no secondary index (they are incomplete until the build ends).
 */
export function plannableDbs(dbs: CacheDbs, transaction: Transaction): CacheDbs {
  if (dbs.indexes.length === 0) return dbs;
  const getFast = dbs.meta.getBinaryFast as (key: string, options?: unknown) => Buffer | undefined;
  if (getFast.call(dbs.meta, INDEX_BUILD_KEY, { transaction }) === undefined) return dbs;
  let view = withoutIndexes.get(dbs);
  if (view === undefined) {
    view = Object.create(dbs, { indexes: { value: [] } }) as CacheDbs;
    withoutIndexes.set(dbs, view);
  }
  return view;
}

/**
 * Run entry key: run number (u32), index number (u8), sequence in the run (u32), all big-endian. Run first, so a
 * commit's entries of every index sort after all earlier runs and are appended.
 */
function runKey(run: number, index: number, seq: number): Buffer {
  const key = Buffer.allocUnsafe(9);
  key.writeUInt32BE(run, 0);
  key[4] = index;
  key.writeUInt32BE(seq, 5);
  return key;
}

/** An append that LMDB refused (a key not past the database's last one) is a bug, never a silent loss. */
function append(db: Database<Buffer, Buffer>, key: Buffer, value: Buffer): void {
  if (!putSucceeded(db, key, value, APPEND))
    throw new Error(`index build: append of key ${key.toString('hex')} refused (not past the last key)`);
}

/** A put among existing entries (a build onto indexes that already hold some; see `IndexBuildState.onto`). */
function put(db: Database<Buffer, Buffer>, key: Buffer, value: Buffer): void {
  db.putSync(key, value);
}

/** An index entry to defer: its index key, the data key of its record and the record's bytes (the entry's value). */
export interface DeferredEntry {
  key: Buffer;
  dataKey: Buffer;
  value: Buffer;
}

/** A run entry as the merge reads it: `bytes` is null in runs that hold only the data key. */
interface RunEntry {
  key: Buffer;
  dataKey: Buffer;
  bytes: Buffer | null;
}

/**
 * Run entry value ({@link writeRunValue}): u16 index-key length, index key, u16 data-key length, data key, the
 * record's bytes. Carrying the bytes costs one more copy of each record in the runs (appended, then dropped) and
 * spares the merge a B-tree lookup in `data` per entry, its largest cost (docs/cache-index-build.md § Runs carry
 * the records).
 * Without `withBytes` (a build begun by an earlier version): u16 index-key length, index key, data key.
 */
function runValueLength(entry: DeferredEntry, withBytes: boolean): number {
  return withBytes
    ? 4 + entry.key.length + entry.dataKey.length + entry.value.length
    : 2 + entry.key.length + entry.dataKey.length;
}

/** Writes the run value of `entry` at the start of `out` (long enough: {@link runValueLength}). */
function writeRunValue(entry: DeferredEntry, withBytes: boolean, out: Buffer): void {
  const { key, dataKey, value } = entry;
  // TypedArray#set rather than Buffer#copy: this runs for every index entry of a load.
  let at = out.writeUInt16BE(key.length, 0);
  out.set(key, at);
  at += key.length;
  if (withBytes) at = out.writeUInt16BE(dataKey.length, at);
  out.set(dataKey, at);
  if (withBytes) out.set(value, at + dataKey.length);
}

/** The run entry in the first `length` bytes of `value` (views into it). */
function parseRunValue(value: Buffer, withBytes: boolean, length = value.length): RunEntry {
  const keyEnd = 2 + value.readUInt16BE(0);
  if (!withBytes)
    return { key: value.subarray(2, keyEnd), dataKey: value.subarray(keyEnd, length), bytes: null };
  const dataKeyEnd = keyEnd + 2 + value.readUInt16BE(keyEnd);
  return {
    key: value.subarray(2, keyEnd),
    dataKey: value.subarray(keyEnd + 2, dataKeyEnd),
    bytes: value.subarray(dataKeyEnd, length),
  };
}

/**
 * How the merge reads runs: lmdb-js hands each value of a binary database out as a fresh copy (a new ArrayBuffer
 * per run entry, ≈ 6 % of a 200 000-record bulk load's CPU before its GC). Through this decoder (lmdb-js passes
 * its shared read buffer to a decoder that copies) each value is copied into `target`, the buffer of the run
 * being read, grown when too small; keys are not read at all. Set `target` before each `next()`, read it back after
 * (it may have grown); the decoded value is the value's length.
 */
const runReader = {
  target: Buffer.allocUnsafe(0) as Buffer,
  encode: (value: Buffer): Buffer => value,
  decode(source: Uint8Array, size: number): number {
    if (runReader.target.length < size)
      runReader.target = Buffer.allocUnsafe(Math.max(size, 2 * runReader.target.length, 256));
    // A view of exactly the value: lmdb-js's shared buffer is larger than the `length` it sets on it.
    runReader.target.set(new Uint8Array(source.buffer, source.byteOffset, size));
    return size;
  },
};
const runKeys = {
  writeKey(key: Buffer, target: Uint8Array, start: number): number {
    target.set(key, start);
    return start + key.length;
  },
  readKey: (): null => null,
};

/**
 * Appends one commit's entries (per index, sorted by key) as run `build.runs` and returns the new state. Call
 * inside the commit's write transaction, then store the state under {@link INDEX_BUILD_KEY}.
 */
export function appendRuns(
  dbs: CacheDbs,
  build: IndexBuildState,
  entries: readonly (readonly DeferredEntry[])[],
  stale: boolean,
): IndexBuildState {
  const runs = runsDb(dbs);
  const run = build.runs;
  const withBytes = build.withBytes === true;
  let wrote = false;
  // One key and one value buffer for every put: putSync copies both into LMDB before it returns.
  let value = Buffer.allocUnsafe(4096);
  entries.forEach((sorted, index) => {
    const key = runKey(run, index, 0);
    for (let seq = 0; seq < sorted.length; seq++) {
      const entry = sorted[seq]!;
      const length = runValueLength(entry, withBytes);
      if (length > value.length) value = Buffer.allocUnsafe(Math.max(length, value.length * 2));
      writeRunValue(entry, withBytes, value);
      key.writeUInt32BE(seq, 5);
      // Keys grow (index, run, seq): every put lands at the database's end.
      append(runs, key, value.subarray(0, length));
      wrote = true;
    }
  });
  return { ...build, runs: wrote ? run + 1 : run, stale: build.stale || stale };
}

/**
 * A run being merged: its iterator, its current head (views into `buffer`, which only this run's next entry
 * overwrites), and how many of its entries were consumed.
 */
interface RunCursor {
  run: number;
  seq: number;
  iterator: Iterator<{ key: null; value: number }>;
  buffer: Buffer;
  head: RunEntry;
}

/** Reads the cursor's next run entry into its buffer; false when the run is exhausted. */
function advance(
  cursor: Pick<RunCursor, 'iterator' | 'buffer'> & { head?: RunEntry },
  withBytes: boolean,
): boolean {
  runReader.target = cursor.buffer;
  const next = cursor.iterator.next();
  cursor.buffer = runReader.target;
  if (next.done) return false;
  cursor.head = parseRunValue(cursor.buffer, withBytes, next.value.value);
  return true;
}

/** Binary min-heap of run cursors by their head's key. */
class RunHeap {
  readonly items: RunCursor[] = [];

  push(cursor: RunCursor): void {
    const items = this.items;
    items.push(cursor);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (Buffer.compare(items[parent]!.head.key, cursor.head.key) <= 0) break;
      items[i] = items[parent]!;
      i = parent;
    }
    items[i] = cursor;
  }

  /** Restores the heap after the top's head changed, or removes the top when its run is `exhausted`. */
  fixTop(exhausted: boolean): void {
    const items = this.items;
    let moving: RunCursor;
    if (exhausted) {
      const last = items.pop()!;
      if (items.length === 0) return;
      moving = last;
    } else moving = items[0]!;
    const n = items.length;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const child =
        right < n && Buffer.compare(items[right]!.head.key, items[left]!.head.key) < 0 ? right : left;
      if (Buffer.compare(items[child]!.head.key, moving.head.key) >= 0) break;
      items[i] = items[child]!;
      i = child;
    }
    items[i] = moving;
  }
}

/**
 * Merges the pending runs into the indexes and ends the build: each index is cleared (a build interrupted by a
 * crash is redone from its runs), then filled in key order in transactions of {@link MERGE_CHUNK} entries;
 * the last one drops the runs and the build entry, which makes the indexes plannable. `onProgress` is told
 * after each transaction.
 */
export async function finishIndexBuild(
  dbs: CacheDbs,
  primaryKey: readonly string[],
  options: { chunk?: number; onProgress?: (merged: number) => void } = {},
): Promise<void> {
  const build = pendingBuild(dbs);
  if (build === null) return;
  const chunk = options.chunk ?? MERGE_CHUNK;
  const root = dbs.env.root;
  const runs = runsDb(dbs);
  // The same database, read through `runReader` (no copy allocated per entry).
  const runsRead = root.openDB<number, Buffer>(RUNS_DB, { keyEncoder: runKeys, encoder: runReader } as never);
  const withBytes = build.withBytes === true;
  // Onto entries already there: put among them (a redo after a crash puts the same entries again). Otherwise the
  // index is cleared first (a crash may have left part of an earlier merge) and filled by appends.
  const write = build.onto === true ? put : append;
  let merged = 0;
  for (let i = 0; i < dbs.indexes.length; i++) {
    const index = dbs.indexes[i]!;
    if (build.onto !== true) root.transactionSync(() => index.db.clearSync());
    // Where each run resumes (entries consumed so far), kept across transactions.
    const positions = Array.from({ length: build.runs }, () => 0);
    let done = false;
    let lastKey: Buffer | null = null;
    while (!done) {
      root.transactionSync(() => {
        const heap = new RunHeap();
        const open = (run: number) => {
          const iterator = runsRead
            .getRange({ start: runKey(run, i, positions[run]!), end: runKey(run, i + 1, 0) })
            [Symbol.iterator]() as unknown as RunCursor['iterator'];
          const cursor = { run, seq: positions[run]!, iterator, buffer: Buffer.allocUnsafe(1024) };
          if (advance(cursor, withBytes)) heap.push(cursor as RunCursor);
        };
        for (let run = 0; run < build.runs; run++) open(run);
        let wrote = 0;
        while (heap.items.length > 0 && wrote < chunk) {
          const top = heap.items[0]!;
          const entry = top.head;
          lastKey = appendEntry(dbs, index, primaryKey, entry, lastKey, build.stale, write);
          wrote += 1;
          top.seq += 1;
          positions[top.run] = top.seq;
          heap.fixTop(!advance(top, withBytes));
        }
        for (const cursor of heap.items) cursor.iterator.return?.();
        merged += wrote;
        done = heap.items.length === 0;
        if (done && i === dbs.indexes.length - 1) {
          runs.clearSync();
          dbs.meta.removeSync(INDEX_BUILD_KEY);
        }
      });
      options.onProgress?.(merged);
      // Other work of the process (leases, HTTP) runs between transactions.
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
  if (dbs.indexes.length === 0)
    root.transactionSync(() => {
      runs.clearSync();
      dbs.meta.removeSync(INDEX_BUILD_KEY);
    });
}

/**
 * Appends `entry` to `index` with its record's current bytes, unless it repeats the last key (the same record
 * loaded twice) or, with `stale` runs, the record is gone or its current version has another key in this index.
 * Without stale runs every record was loaded once, so the bytes a run carries are the current ones.
 */
function appendEntry(
  dbs: CacheDbs,
  index: IndexDb,
  primaryKey: readonly string[],
  entry: RunEntry,
  lastKey: Buffer | null,
  stale: boolean,
  write: typeof append,
): Buffer | null {
  if (lastKey?.equals(entry.key)) return lastKey;
  if (!stale && entry.bytes !== null) {
    write(index.db, entry.key, entry.bytes);
    // A copy: the entry's buffer is its run's, which the run's next entry overwrites.
    return Buffer.from(entry.key);
  }
  const current = dbs.data.getBinaryFast(entry.dataKey);
  if (current === undefined) return lastKey;
  // A view of exactly the value: LMDB's read buffer is larger than its (overridden) length says.
  const bytes = Buffer.from(current.buffer, current.byteOffset, current.length);
  if (stale && !indexKey(index, decodeRecord(bytes), primaryKey).equals(entry.key)) return lastKey;
  write(index.db, entry.key, bytes);
  // A copy: the entry's buffer belongs to the run iterator.
  return Buffer.from(entry.key);
}

/** Drops pending runs and the build entry (a clear). Call inside a write transaction. */
export function dropIndexBuild(dbs: CacheDbs): void {
  if (dbs.env.readOnly) return;
  runsDb(dbs).clearSync();
  dbs.meta.removeSync(INDEX_BUILD_KEY);
}
