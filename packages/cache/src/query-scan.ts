/**
 * How a query plan is scanned: the entries of its ranges in order (the primary data or an index's covering
 * entries), seeking to an `$after` position, with runs of truncated keys put back in their real order.
 */
import type { FieldType } from '@sluice/core';
import type { Transaction } from 'lmdb';
import type { CacheDbs } from './cache-dbs.js';
import { encodeKey, truncatedComponentEnd } from './key-codec.js';
import { type Arena, lastScannedKey } from './page-arena.js';
import type { CheckedQuery } from './query-check.js';
import type { Plan } from './query-plan.js';
import type { Row } from './query-rows.js';

/** What a query runs against: one cache's databases, read in one snapshot. */
export interface ReadContext {
  dbs: CacheDbs;
  cache: string;
  primaryKey: readonly string[];
  transaction: Transaction;
  scanCap: number;
  /** Where index scans copy records to (reused from read to read; active for the read's duration). */
  arena: Arena;
  /** The schema's field types (a key of number and boolean fields is never truncated). */
  fields: Readonly<Record<string, FieldType>>;
  /**
   * True when the change-log database was open before this snapshot began, so the read may use it (a cursor's
   * position whose record changed since is found there; see `recordAtSequence`).
   */
  logReady: boolean;
}

const FF = Buffer.from([0xff]);
const LOWEST_KEY = Buffer.from([0]);
/** The key of a row whose scanned key nothing reads (see `scanEntries`). */
const NO_KEY: Buffer = Buffer.alloc(0);

/** Where an ordered scan may start for an `$after` position (never past a record that sorts after it). */
export function seekKey(
  plan: Plan,
  query: CheckedQuery,
  primaryKey: readonly string[],
  tuple: unknown[],
): Buffer | null {
  const known = new Map<string, unknown>();
  query.orderBy.forEach((o, i) => {
    known.set(o.field, tuple[i]);
  });
  primaryKey.forEach((field, i) => {
    known.set(field, tuple[query.orderBy.length + i]);
  });
  const values: unknown[] = [];
  for (const field of plan.keyFields) {
    if (plan.fixed.has(field)) values.push(plan.fixed.get(field));
    else if (known.has(field)) values.push(known.get(field));
    else return null;
  }
  const key = encodeKey(values, plan.budget);
  const cluster = truncatedComponentEnd(key, plan.components);
  // Inside a cluster of truncated keys the order is by hash, so the scan starts at the cluster's edge and the rows
  // up to the position (re-sorted by their real values) are passed over. Forward: its first key. Reverse: the first
  // byte string after it — with no seek a reverse scan started at the top of the range again on every page, and
  // once more than `cache.scanCap` records sorted before the position it never reached it.
  if (cluster >= 0) return plan.direction === 'asc' ? key.subarray(0, cluster) : afterCluster(key, cluster);
  return key;
}

/**
 * A seek key above every key of the cluster ending at `end` (see `truncatedComponentEnd`: `…, 0x00, 0xFF`), for a
 * reverse scan (which visits keys up to the seek key + 0xFF): the cluster's common start with its 0x00 raised to
 * 0x01.
 */
function afterCluster(key: Buffer, end: number): Buffer {
  const out = Buffer.from(key.subarray(0, end - 1));
  out[end - 2] = 0x01;
  return out;
}

/** Receives scanned rows in order; returns false to stop the scan. */
export type Visit = (row: Row) => boolean;

/**
 * Visits the raw entries of the plan's ranges in scan order; returns false when `visit` stopped it. Rows of an
 * index scan carry their scanned key only when `needKeys` (or the scan is reverse); otherwise an empty one.
 */
export function scanEntries(
  ctx: ReadContext,
  plan: Plan,
  reverse: boolean,
  seek: Buffer | null,
  visit: Visit,
  needKeys = false,
): boolean {
  const { transaction } = ctx;
  const count = plan.ranges.length;
  for (let r = 0; r < count; r++) {
    const range = plan.ranges[reverse ? count - 1 - r : r]!;
    let lo = range.lo;
    let hi = range.hi;
    if (seek && !reverse && Buffer.compare(seek, lo) > 0) lo = seek;
    if (seek && reverse) {
      const upTo = Buffer.concat([seek, FF]);
      if (Buffer.compare(upTo, hi) < 0) hi = upTo;
    }
    if (Buffer.compare(lo, hi) >= 0) continue;
    if (plan.source.kind === 'primary') {
      const iterable = reverse
        ? ctx.dbs.data.getRange({ start: hi, reverse: true, transaction })
        : ctx.dbs.data.getRange({ start: lo, end: hi, transaction });
      for (const { key, value } of iterable) {
        if (reverse) {
          if (Buffer.compare(key, hi) >= 0) continue;
          if (Buffer.compare(key, lo) < 0) break;
        }
        if (!visit({ key, dataKey: key, bytes: value, offset: 0, length: value.length, record: null }))
          return false;
      }
      continue;
    }
    // Covering entries: the value is the record's stored text, copied by the scan handle straight from
    // LMDB's read buffer into the read's arena (it reads as its offset there); no data lookup. The key reads as
    // its length and is copied only where it is used (page-arena.ts `lastScannedKey`).
    const db = plan.source.index.scan;
    const { arena } = ctx;
    // Reverse scans stop at the lowest possible key ([0], as for binary keys); `lo` bounds them below.
    const iterable = reverse
      ? db.getRange({ start: hi, end: LOWEST_KEY, reverse: true, transaction })
      : db.getRange({ start: lo, end: hi, transaction });
    const covering = ctx.dbs.covering;
    for (const { value } of iterable) {
      const bytes = arena.buffer;
      const length = arena.lastLength;
      let key: Buffer = NO_KEY;
      if (reverse) {
        key = lastScannedKey();
        if (Buffer.compare(key, hi) >= 0) continue;
        if (Buffer.compare(key, lo) < 0) break;
      } else if (needKeys) key = lastScannedKey();
      if (covering) {
        if (!visit({ key, dataKey: null, bytes, offset: value, length, record: null })) return false;
        continue;
      }
      // A format-2 generation (served read-only while it is rebuilt): the entry holds the data key.
      const dataKey = Buffer.from(bytes.subarray(value, value + length));
      const record = readData(ctx, dataKey);
      if (record === undefined) continue;
      if (!visit({ key, dataKey, bytes: record, offset: 0, length: record.length, record: null }))
        return false;
    }
  }
  return true;
}

// lmdb reads in a given snapshot with options (its typings omit the parameter); the result is a copy.
type SnapshotGet = (key: Buffer, options: { transaction: Transaction }) => Buffer | undefined;

/** The data entry at `key` in the read's snapshot (a copy), or undefined. */
function readData(ctx: ReadContext, key: Buffer): Buffer | undefined {
  const data = ctx.dbs.data;
  return (data.getBinary as unknown as SnapshotGet).call(data, key, { transaction: ctx.transaction });
}

/** Field types whose values never encode to a truncated key component (numbers, booleans, null). */
const NEVER_TRUNCATED = new Set(['integer', 'number', 'boolean']);

/** True when some scanned key may hold a truncated component (a string or JSON value of a key field). */
function mayTruncate(ctx: ReadContext, plan: Plan): boolean {
  for (const field of plan.keyFields) {
    const type = Object.hasOwn(ctx.fields, field) ? ctx.fields[field] : undefined;
    if (type === undefined || !NEVER_TRUNCATED.has(type)) return true;
  }
  return false;
}

/**
 * Visits the rows of the plan in scan order. For ordered scans whose keys may be truncated, runs of keys
 * truncated at the same place (whose order is by hash) are re-sorted by their real values, so the order is
 * exact; keys of number and boolean fields never are, and are visited as scanned.
 */
export function scanRows(
  ctx: ReadContext,
  plan: Plan,
  reverse: boolean,
  seek: Buffer | null,
  compare: (a: Row, b: Row) => number,
  visit: Visit,
): void {
  if (!plan.ordered || !mayTruncate(ctx, plan)) {
    scanEntries(ctx, plan, reverse, seek, visit);
    return;
  }
  let cluster: { id: Buffer; items: Row[] } | null = null;
  // Visits a finished cluster in its real order; false when `visit` stopped.
  const flush = (): boolean => {
    const items = cluster!.items.sort(compare);
    cluster = null;
    for (const item of items) if (!visit(item)) return false;
    return true;
  };
  const go = scanEntries(
    ctx,
    plan,
    reverse,
    seek,
    (row) => {
      const end = truncatedComponentEnd(row.key, plan.components);
      if (end < 0) {
        if (cluster && !flush()) return false;
        return visit(row);
      }
      const id = row.key.subarray(0, end);
      if (cluster?.id.equals(id)) cluster.items.push(row);
      else {
        if (cluster && !flush()) return false;
        // A view is enough: each row's key is its own copy (`lastScannedKey`, or lmdb-js's for primary scans).
        cluster = { id, items: [row] };
      }
      return true;
    },
    true,
  );
  if (go && cluster) flush();
}
