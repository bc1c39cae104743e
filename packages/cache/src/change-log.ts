import {
  CACHE_DEFAULTS,
  type ChangeEntry,
  type ChangeHead,
  type ChangeLog,
  type PinnedGeneration,
  type PipelineCheckpoint,
} from '@sluice/core';
import type { Database, DatabaseOptions, Transaction } from 'lmdb';
import type { CacheDbs } from './cache-dbs.js';
import { decodeRecord } from './record-json.js';

/**
 * The change log of one cache generation: a `changes` LMDB database keyed by sequence (1, 2, 3, …), written by
 * the commit path inside the same write transaction as the records it describes, so a reader that sees a record
 * also sees the change that produced it. Each commit appends its upserts and deletes, then one commit marker
 * with the checkpoint's positions; the log is trimmed (whole transactions, oldest first) by record count and age.
 * The `changes` entry of the `meta` database holds the head: the oldest retained and the next sequence.
 */

/** How much of the log a generation keeps (`cache.changes.retainRecords` / `retainMs`). */
export interface ChangeRetention {
  /** Most log entries kept (the newest transaction is always kept whole). */
  retainRecords: number;
  /** Transactions committed longer ago than this are dropped (0 = no age limit). */
  retainMs: number;
}

/** Configuration's `cache.changes` defaults (defined once, in core). */
export const DEFAULT_RETENTION: ChangeRetention = { ...CACHE_DEFAULTS.changes };

/** Stored form (short field names: the log is written on every commit). */
type StoredEntry =
  // An upsert holds the record's stored JSON text (what the data entry holds): no re-encoding per record. `w`:
  // the stored JSON text it replaced, 0 when the key held none; absent in entries logged before it was kept.
  | { o: 'j'; k: unknown[]; j: Uint8Array; w?: Uint8Array | 0 }
  // Upserts logged before the JSON form (the record MessagePack-encoded); still read.
  | { o: 'u'; k: unknown[]; r: Record<string, unknown> }
  | { o: 'd'; k: unknown[]; w?: Uint8Array | 0 }
  | { o: 'c'; p: Record<string, unknown> | null; e: number | null; at: number };

interface StoredHead {
  first: number;
  next: number;
}

const EMPTY_HEAD: StoredHead = { first: 1, next: 1 };
const HEAD_KEY = 'changes';
const LOG_OPTIONS = { encoder: { useRecords: false } } as DatabaseOptions;

/**
 * A change handed to {@link appendChanges}: the primary-key values, the new record's stored JSON text or null
 * (delete), and the stored JSON text it replaced (null: none; undefined: not known, nothing logged for it).
 */
export interface LoggedChange {
  pk: readonly unknown[];
  bytes: Uint8Array | null;
  before?: Uint8Array | null;
}

/** The stored form of one upsert or delete. */
function storedChange(change: LoggedChange): StoredEntry {
  const was = change.before === undefined ? {} : { w: change.before ?? (0 as const) };
  return change.bytes === null
    ? { o: 'd', k: change.pk as unknown[], ...was }
    : { o: 'j', k: change.pk as unknown[], j: change.bytes, ...was };
}

function logDb(dbs: CacheDbs): Database<StoredEntry, number> {
  return dbs.env.db<StoredEntry, number>('changes', LOG_OPTIONS);
}

/** Creates the log database (writable environments, at open: never inside a write transaction). */
export function ensureChangeLog(dbs: CacheDbs): void {
  if (!dbs.env.readOnly) void logDb(dbs);
}

/**
 * Appends one commit's changes and its commit marker, then trims by `retention`. Call inside the commit's write
 * transaction (synchronous puts), so the log and the data land together or not at all.
 */
/**
 * Where the log's oldest retained transaction ends and when it committed, as last found by a trim: a writer keeps
 * one so each commit's trim does not re-read that transaction (a snapshot's is one transaction of every record of
 * the table: re-reading it took ~10 ms per commit of a 20 000-row table). What it holds never goes stale: a
 * committed transaction's entries are never rewritten, and sequences only grow (a clear starts after them).
 */
export interface OldestTransactionMemo {
  /** The sequence the transaction starts at (the log's `first` when it was found). */
  first: number;
  /** Its commit marker's sequence. */
  end: number;
  /** Its commit instant (ms since the epoch). */
  at: number;
}

export function appendChanges(
  dbs: CacheDbs,
  changes: Iterable<LoggedChange>,
  checkpoint: PipelineCheckpoint | null,
  retention: ChangeRetention,
  now = Date.now(),
  memo: { oldest?: OldestTransactionMemo } = {},
  /** Source transactions this commit holds before `changes`: each logged apart, with a marker at its positions. */
  earlier: ReadonlyArray<{ changes: Iterable<LoggedChange>; positions: Record<string, unknown> }> = [],
): void {
  const db = logDb(dbs);
  const head = (dbs.meta.get(HEAD_KEY) as StoredHead | undefined) ?? { ...EMPTY_HEAD };
  const start = head.next;
  let seq = start;
  for (const transaction of earlier) {
    for (const change of transaction.changes) db.putSync(seq++, storedChange(change));
    db.putSync(seq++, { o: 'c', p: transaction.positions, e: checkpoint?.epoch ?? null, at: now });
  }
  for (const change of changes) db.putSync(seq++, storedChange(change));
  db.putSync(seq++, { o: 'c', p: checkpoint?.positions ?? null, e: checkpoint?.epoch ?? null, at: now });
  const first = trim(db, head.first, start, retention, now, seq - start, memo);
  dbs.meta.putSync(HEAD_KEY, { first, next: seq } satisfies StoredHead);
}

/** A step of {@link appendSteps}: a change, or the end of a source transaction at `positions`. */
export type LoggedStep = LoggedChange | { positions: Record<string, unknown> };

/**
 * Appends one commit's steps — changes in order, each source transaction ended by its positions — then the commit
 * marker at the checkpoint (which ends the last transaction: a mark that is the last step is that one's own), then
 * trims. `steps` is read once, lazily: a commit replaying its staged changes (staged-replay.ts) writes each logged
 * change as it applies it. Call inside the commit's write transaction.
 */
export function appendSteps(
  dbs: CacheDbs,
  steps: Iterable<LoggedStep>,
  checkpoint: PipelineCheckpoint | null,
  retention: ChangeRetention,
  now = Date.now(),
  memo: { oldest?: OldestTransactionMemo } = {},
): void {
  const db = logDb(dbs);
  const head = (dbs.meta.get(HEAD_KEY) as StoredHead | undefined) ?? { ...EMPTY_HEAD };
  const start = head.next;
  let seq = start;
  // A mark is written once a step follows it: the last one's transaction ends with the checkpoint's marker.
  let mark: Record<string, unknown> | null = null;
  for (const step of steps) {
    if (mark !== null) db.putSync(seq++, { o: 'c', p: mark, e: checkpoint?.epoch ?? null, at: now });
    mark = null;
    if ('positions' in step) mark = step.positions;
    else db.putSync(seq++, storedChange(step));
  }
  db.putSync(seq++, { o: 'c', p: checkpoint?.positions ?? null, e: checkpoint?.epoch ?? null, at: now });
  const first = trim(db, head.first, start, retention, now, seq - start, memo);
  dbs.meta.putSync(HEAD_KEY, { first, next: seq } satisfies StoredHead);
}

/**
 * Drops whole transactions from the oldest while the log holds more than `retainRecords` entries or the
 * oldest transaction is older than `retainMs`; never the transaction starting at `newest`.
 */
function trim(
  db: Database<StoredEntry, number>,
  first: number,
  newest: number,
  retention: ChangeRetention,
  now: number,
  newestSize: number,
  memo: { oldest?: OldestTransactionMemo },
): number {
  let oldest = first;
  while (oldest < newest) {
    const size = newest - oldest + newestSize;
    // The oldest transaction: its entries up to and including its commit marker (which has its instant).
    let end = oldest;
    let at = now;
    const known = memo.oldest;
    if (known !== undefined && known.first === oldest && known.end < newest) {
      end = known.end;
      at = known.at;
    } else {
      for (const { key, value } of db.getRange({ start: oldest, end: newest })) {
        end = key;
        if (value.o === 'c') {
          at = value.at;
          memo.oldest = { first: oldest, end, at };
          break;
        }
      }
    }
    const tooMany = size > retention.retainRecords;
    const tooOld = retention.retainMs > 0 && at < now - retention.retainMs;
    if (!tooMany && !tooOld) break;
    for (let seq = oldest; seq <= end; seq++) db.removeSync(seq);
    oldest = end + 1;
  }
  return oldest;
}

/**
 * Forgets the whole log (a cache cleared for a rebuild): tokens from before the clear are past retention.
 * Inside the clearing write transaction.
 */
export function clearChanges(dbs: CacheDbs): void {
  const head = (dbs.meta.get(HEAD_KEY) as StoredHead | undefined) ?? { ...EMPTY_HEAD };
  logDb(dbs).clearSync();
  dbs.meta.putSync(HEAD_KEY, { first: head.next, next: head.next } satisfies StoredHead);
}

/**
 * `entry` with its `before` (decoded when first read: most readers never ask), unless the log does not say.
 * Not enumerable: an entry reads, compares and serializes as before.
 */
function withBefore<T extends ChangeEntry>(entry: T, was: Uint8Array | 0 | undefined): T {
  if (was === undefined) return entry;
  let decoded: Record<string, unknown> | undefined;
  Object.defineProperty(entry, 'before', {
    enumerable: false,
    get: () => {
      if (was === 0) return null;
      decoded ??= decodeRecord(was);
      return decoded;
    },
  });
  return entry;
}

function decode(seq: number, entry: StoredEntry): ChangeEntry {
  if (entry.o === 'j')
    return withBefore({ seq, op: 'upsert', key: entry.k, record: decodeRecord(entry.j) }, entry.w);
  if (entry.o === 'u') return { seq, op: 'upsert', key: entry.k, record: entry.r };
  if (entry.o === 'd') return withBefore({ seq, op: 'delete', key: entry.k }, entry.w);
  return { seq, op: 'commit', position: entry.p, epoch: entry.e, at: entry.at };
}

/** The first sequence after a read snapshot's log (the next one a commit will write), or null without a log. */
export function logSequenceIn(dbs: CacheDbs, transaction: Transaction): number | null {
  const head = dbs.meta.get(HEAD_KEY, { transaction }) as StoredHead | undefined;
  return head === undefined ? null : head.next;
}

/**
 * The stored JSON text a record had at log sequence `since`, found in the first change of its key logged at or after
 * `since` (its `w`, what that change replaced), read in `transaction`; undefined when the log no longer reaches back
 * to `since` (trimmed, or cleared), has no change of the key since, or did not keep what it replaced. `isKey` tells
 * the record's key (the primary-key values an entry holds) from the others. The log database must have been opened
 * before the snapshot began ({@link ChangeLogReader.ready}): opening it inside a read-only snapshot ends the snapshot.
 *
 * @example
 * ```ts
 * const before = recordAtSequence(dbs, transaction, cursorSeq, (pk) => dataKey(dbs, pk).equals(key));
 * ```
 */
export function recordAtSequence(
  dbs: CacheDbs,
  transaction: Transaction,
  since: number,
  isKey: (pk: readonly unknown[]) => boolean,
): Uint8Array | undefined {
  const head = dbs.meta.get(HEAD_KEY, { transaction }) as StoredHead | undefined;
  if (head === undefined || since < head.first || since >= head.next) return undefined;
  for (const { value } of logDb(dbs).getRange({ start: since, end: head.next, transaction })) {
    if (value.o === 'c' || !isKey(value.k)) continue;
    // The key's first change since: what it replaced is the record as it was at `since` (0: there was none).
    return value.o === 'u' || value.w === undefined || value.w === 0 ? undefined : value.w;
  }
  return undefined;
}

/**
 * Read access to a generation's change log. Each call without a transaction reads the latest commit (another
 * process's commits included): `head()` is one small read, cheap enough to check on a timer.
 */
export class ChangeLogReader implements ChangeLog {
  constructor(private readonly dbs: CacheDbs) {}

  private opts(transaction: Transaction | undefined) {
    return transaction ? { transaction } : undefined;
  }

  private opened = false;

  /**
   * Opens the log database if it exists. Never while a pinned snapshot may be the environment's current read
   * transaction: opening a database ends that transaction (so only from `head()`/`read()` without one, and
   * before pinning).
   */
  private hasLog(): boolean {
    if (this.opened) return true;
    try {
      void logDb(this.dbs);
      this.opened = true;
    } catch {
      // A generation written before change logs existed (read-only open of a database that is not there).
    }
    return this.opened;
  }

  /**
   * Opens the log database, if the generation has one, so a read snapshot begun afterwards can read it (see
   * {@link recordAtSequence}); true when it is open.
   */
  ready(): boolean {
    return this.hasLog();
  }

  /** The retained range as of the latest commit (or as of `transaction`). */
  head(transaction?: Transaction): ChangeHead {
    if (!transaction) {
      this.hasLog();
      this.dbs.env.root.resetReadTxn();
    }
    const head = (this.dbs.meta.get(HEAD_KEY, this.opts(transaction)) as StoredHead | undefined) ?? {
      ...EMPTY_HEAD,
    };
    return { first: head.first, last: head.next - 1 };
  }

  /** Up to `limit` entries after sequence `after`, oldest first. */
  read(after: number, limit: number, transaction?: Transaction): ChangeEntry[] {
    if (transaction ? !this.opened : !this.hasLog()) return [];
    const out: ChangeEntry[] = [];
    const range = logDb(this.dbs).getRange({
      start: after + 1,
      limit,
      ...(transaction ? { transaction } : {}),
    });
    for (const { key, value } of range) out.push(decode(key, value));
    return out;
  }

  /**
   * Pins one read snapshot (until `close`): its head, its records (in primary-key order) and its log agree
   * with each other. Used for a consistent snapshot and for the merge at a switch.
   */
  pin(): PinnedSnapshot {
    this.hasLog();
    this.dbs.env.root.resetReadTxn();
    const transaction = this.dbs.env.root.useReadTransaction();
    return new PinnedSnapshot(this, this.dbs, transaction);
  }
}

/** One held read snapshot of a generation (release with `close`, or `using`). */
export class PinnedSnapshot implements PinnedGeneration, Disposable {
  readonly head: ChangeHead;
  private done = false;

  constructor(
    private readonly reader: ChangeLogReader,
    private readonly dbs: CacheDbs,
    private readonly transaction: Transaction,
  ) {
    this.head = reader.head(transaction);
  }

  /** Entries after `after` in this snapshot. */
  read(after: number, limit: number): ChangeEntry[] {
    return this.reader.read(after, limit, this.transaction);
  }

  /**
   * Records in encoded primary-key order, from after `afterKey` (exclusive), each with its data key (byte
   * order = key order, so two generations with the same key types merge by comparing these).
   */
  *records(afterKey?: Buffer): Generator<{ dataKey: Buffer; record: Record<string, unknown> }> {
    for (const { key, value } of this.dbs.data.getRange({
      ...(afterKey ? { start: afterKey } : {}),
      transaction: this.transaction,
    })) {
      if (afterKey && key.equals(afterKey)) continue;
      yield { dataKey: key, record: decodeRecord(value) };
    }
  }

  close(): void {
    if (this.done) return;
    this.done = true;
    this.transaction.done();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
