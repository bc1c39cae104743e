/**
 * Writes one commit's staged changes into the data and index databases, inside the commit's write transaction.
 * Index entries are covering (record format 3): each holds the record's stored JSON text, the same bytes as its
 * data entry, so a query an index answers reads the index range alone, without a lookup per record. So an entry
 * is rewritten whenever its record's bytes change, even where its key stays.
 * Every database is written in key order (data by primary key, each index by its own key), which keeps the
 * B-tree pages a commit touches together; a run of keys past the database's last key is appended
 * (`MDB_APPEND`: no search, full pages), which is what a from-scratch snapshot read in key order produces.
 */
import type { Database } from 'lmdb';
import { type CacheDbs, indexKey } from './cache-dbs.js';
import type { DeferredEntry } from './index-build.js';
import type { RecordPatch } from './patch.js';
import { decodeRecord } from './record-json.js';

/** A staged change of one primary key, encoded at `apply` time (outside the write transaction). */
export interface StagedChange {
  /** Data key (encoded primary key). */
  key: Buffer;
  /** Primary-key values (for the change log). */
  pk: unknown[];
  /** The record's stored JSON text (null for a delete). */
  bytes: Buffer | null;
  /** The record's key in each secondary index, in `dbs.indexes` order (null for a delete). */
  indexKeys: Buffer[] | null;
  /**
   * Patches to apply, in order, to the record stored when the commit runs (patch.ts): `bytes` and `indexKeys` are
   * then filled in the write transaction by the `resolve` given to {@link writeChanges}. Absent for a whole record.
   */
  patches?: RecordPatch[] | null;
  /**
   * Filled by {@link writeChanges}: the stored JSON text this change replaces (a copy), or null when its key held
   * no record — what the change log keeps so a filtered change feed can tell whether the record was in view.
   */
  before?: Buffer | null;
}

/**
 * Fills a patched change's `bytes` and `indexKeys` from the stored record (undefined: none), or makes it a delete
 * (`bytes` null) when the patches leave no record; clears `patches`.
 */
export type ResolvePatches = (change: StagedChange, stored: Record<string, unknown> | undefined) => void;

const APPEND = { append: true };
const NO_FLAGS = {};

/**
 * Sorts entries by key bytes. Already-sorted input (a snapshot read in key order) is detected in one pass;
 * otherwise keys are compared as latin1 strings (one char per byte, so string order is byte order), which is
 * several times cheaper than a native `Buffer.compare` per comparison.
 */
function sortByKey<T extends { key: Buffer }>(entries: T[]): T[] {
  let sorted = true;
  for (let i = 1; sorted && i < entries.length; i++)
    if (Buffer.compare(entries[i - 1]!.key, entries[i]!.key) > 0) sorted = false;
  if (sorted) return entries;
  const tagged = entries.map((entry) => ({ id: entry.key.toString('latin1'), entry }));
  tagged.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return tagged.map((t) => t.entry);
}

/** `putSync` in a write transaction, saying whether LMDB stored the entry (its typings say void). */
export function putSucceeded(
  db: Database<Buffer, Buffer>,
  key: Buffer,
  value: Buffer,
  options: { append?: boolean },
): boolean {
  return (db.putSync as unknown as (k: Buffer, v: Buffer, o: object) => boolean).call(
    db,
    key,
    value,
    options,
  );
}

/** The last key of `db` in the current (write) transaction, or null when it is empty. */
function lastKey(db: Database<Buffer, Buffer>): Buffer | null {
  for (const key of db.getKeys({ reverse: true, limit: 1 })) return key as Buffer;
  return null;
}

/** Whether `key` sorts after every key of `db` (in the current write transaction). */
function pastLastKey(db: Database<Buffer, Buffer>, key: Buffer): boolean {
  const last = lastKey(db);
  return last === null || Buffer.compare(key, last) > 0;
}

/** Puts `entries` (sorted, distinct keys) in key order; appends when they all sort after the last key. */
function putSorted(db: Database<Buffer, Buffer>, entries: Array<{ key: Buffer; value: Buffer }>): void {
  if (entries.length === 0) return;
  const append = pastLastKey(db, entries[0]!.key);
  for (const entry of entries)
    if (!putSucceeded(db, entry.key, entry.value, append ? APPEND : NO_FLAGS) && append)
      // LMDB refuses an append that is not past the last key: a lost write, never to pass silently.
      throw new Error(`append of key ${entry.key.toString('hex')} refused (not past the last key)`);
}

function resolvePatches(
  resolve: ResolvePatches | undefined,
  change: StagedChange,
  stored: Record<string, unknown> | undefined,
): void {
  if (resolve === undefined) throw new Error('a patched change needs a resolver');
  resolve(change, stored);
}

/** What {@link writeChanges} did. */
export interface WriteOutcome {
  /** Record-count delta. */
  delta: number;
  /** Deferred writes: each index's entries, sorted by key (null when the indexes were written). */
  deferred: DeferredEntry[][] | null;
  /** A deferred write replaced or deleted a record that existed before (its deferred entries may be stale). */
  replaced: boolean;
  /**
   * Changes that changed nothing — an upsert of the stored bytes, a delete of an absent key — and were not
   * written: the change log leaves them out (null when there were none).
   */
  unchanged: Set<StagedChange> | null;
}

/**
 * Applies `changes` (distinct data keys). `empty` says the data database held nothing before (no previous
 * versions to look up). With `deferIndexes` the index entries are returned (sorted per index) instead of being
 * written, for an index build (index-build.ts); the indexes are not touched. Call inside a write transaction.
 */
export function writeChanges(
  dbs: CacheDbs,
  primaryKey: readonly string[],
  changes: Iterable<StagedChange>,
  empty: boolean,
  deferIndexes = false,
  resolve?: ResolvePatches,
): WriteOutcome {
  const sorted = sortByKey([...changes]);
  const { data, indexes } = dbs;
  // A batch whose keys all sort after the last stored one (a snapshot read in key order) replaces nothing:
  // skip the per-record lookup of a previous version (a B-tree search each, for keys that cannot be there).
  const fresh = empty || sorted.length === 0 || pastLastKey(data, sorted[0]!.key);
  const dataPuts: Array<{ key: Buffer; value: Buffer }> = [];
  const dataRemoves: Buffer[] = [];
  const indexPuts = indexes.map(() => [] as Array<{ key: Buffer; value: Buffer; dataKey: Buffer }>);
  const indexRemoves = indexes.map(() => [] as Buffer[]);
  let delta = 0;
  let replaced = false;
  let unchanged: Set<StagedChange> | null = null;
  const skip = (change: StagedChange) => {
    unchanged ??= new Set();
    unchanged.add(change);
  };
  for (const change of sorted) {
    let oldKeys: Buffer[] | null = null;
    let sameBytes = false;
    change.before = null;
    if (!fresh) {
      // The previous version's index entries move: decode it (the fast read's buffer is reused by the next).
      const old = data.getBinaryFast(change.key);
      if (old !== undefined) {
        // A view of exactly the value: LMDB's read buffer is larger than its (overridden) length says.
        const oldBytes = new Uint8Array(old.buffer, old.byteOffset, old.length);
        const record = decodeRecord(oldBytes);
        // A patch merges with exactly the record this transaction replaces.
        if (change.patches) resolvePatches(resolve, change, record);
        sameBytes = change.bytes?.equals(oldBytes) === true;
        // Copied (the fast read's buffer is reused by the next read); the same bytes need no copy.
        change.before = sameBytes ? change.bytes : Buffer.from(oldBytes);
        oldKeys = indexes.map((index) => indexKey(index, record, primaryKey));
        if (!sameBytes) replaced = true;
      }
    }
    // Nothing stored to fill from: the patch resolves to no record (a delete of an absent key, skipped below).
    if (change.patches) resolvePatches(resolve, change, undefined);
    if (change.bytes === null) {
      if (oldKeys === null) {
        skip(change);
        continue;
      }
      dataRemoves.push(change.key);
      oldKeys.forEach((key, i) => {
        indexRemoves[i]!.push(key);
      });
      delta -= 1;
      continue;
    }
    if (sameBytes) {
      // A re-read of what is stored (a polled source's overlap window, a replayed batch): its data and index
      // entries hold these very bytes already.
      skip(change);
      continue;
    }
    dataPuts.push({ key: change.key, value: change.bytes });
    const keys = change.indexKeys!;
    for (let i = 0; i < indexes.length; i++) {
      const key = keys[i]!;
      const before = oldKeys?.[i];
      const sameKey = before?.equals(key) === true;
      if (before && !sameKey) indexRemoves[i]!.push(before);
      // The entry holds the record's bytes (covering); a same-key entry is overwritten with the new bytes.
      indexPuts[i]!.push({ key, value: change.bytes, dataKey: change.key });
    }
    if (oldKeys === null) delta += 1;
  }
  for (const key of dataRemoves) data.removeSync(key);
  putSorted(data, dataPuts);
  if (deferIndexes) {
    // A replaced version's entry is in a run (the merge drops it: `replaced` marks the runs stale) or, in a build
    // onto indexes that held the load's first records, in the index itself: removed here. In a build that began
    // on an empty generation the indexes hold nothing, and these removals find nothing.
    indexes.forEach((index, i) => {
      for (const key of indexRemoves[i]!) index.db.removeSync(key);
    });
    return { delta, deferred: indexPuts.map((puts) => sortByKey(puts)), replaced, unchanged };
  }
  indexes.forEach((index, i) => {
    const db = index.db;
    const removes = sortByKey(indexRemoves[i]!.map((key) => ({ key })));
    for (const { key } of removes) db.removeSync(key);
    putSorted(db, sortByKey(indexPuts[i]!));
  });
  return { delta, deferred: null, replaced, unchanged };
}
