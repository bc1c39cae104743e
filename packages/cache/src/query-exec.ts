import {
  CursorExpiredError,
  compileFilter,
  type FieldType,
  type Filter,
  type QueryResult,
} from '@sluice/core';
import type { Transaction } from 'lmdb';
import { type CacheDbs, dataKey } from './cache-dbs.js';
import {
  type Abbreviated,
  type DecodedCursor,
  decodeCursor,
  encodeCursor,
  filterSignature,
  orderSignature,
  valueHash,
} from './cursor.js';
import { plannableDbs } from './index-build.js';
import { encodeKey, truncatedComponentEnd } from './key-codec.js';
import type { Arena } from './page-arena.js';
import type { CheckedQuery } from './query-check.js';
import { type Plan, planQuery, recordComparator, sortTuple, tupleComparator } from './query-plan.js';
import { decodeRecord } from './record-json.js';

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
}

const FF = Buffer.from([0xff]);

/** Where an ordered scan may start for an `$after` position (never past a record that sorts after it). */
function seekKey(
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
  // Inside a cluster of truncated keys the order is by hash: start at the cluster (forward) or do not seek.
  if (cluster >= 0) return plan.direction === 'asc' ? key.subarray(0, cluster) : null;
  return key;
}

/**
 * One scanned entry: its scanned key, its data key and its stored JSON text. Its fields are decoded only when
 * something needs them (a residual filter, a sort, a cursor): see {@link fieldsOf}.
 */
export interface Row {
  key: Buffer;
  /** The data key, when the scan read it (primary scans); see {@link dataKeyOf}. */
  dataKey: Buffer | null;
  /** The buffer holding the record's JSON text at `offset`, `length` bytes (a copy LMDB made for the scan). */
  bytes: Buffer;
  offset: number;
  length: number;
  record: Record<string, unknown> | null;
}

/** The data key of a row: scanned, or encoded from its primary-key values (index scans read none). */
function dataKeyOf(ctx: ReadContext, row: Row): Buffer {
  if (row.dataKey === null) {
    const record = fieldsOf(row);
    row.dataKey = dataKey(
      ctx.dbs,
      ctx.primaryKey.map((field) => record[field]),
    );
  }
  return row.dataKey;
}

/** The fields of a row (decoded from its JSON text once). */
export function fieldsOf(row: Row): Record<string, unknown> {
  if (row.record === null)
    row.record = JSON.parse(row.bytes.toString('utf8', row.offset, row.offset + row.length));
  return row.record!;
}

const OPEN = 0x5b; // [
const COMMA = 0x2c;
const CLOSE = 0x5d; // ]

/** What a page's JSON array is written between (UTF-8 text; see `JsonPageFrame` in core). */
export interface PageFrame {
  head: string;
  tail: string;
}

/**
 * The JSON array of the rows' stored texts, `[a,b,…]` (between the frame's head and tail, when given), in one
 * buffer. Rows scanned one after another into the arena sit one separator byte apart, so a run of them is one
 * copy, with commas in those bytes.
 */
export function rowsJson(rows: readonly Row[], frame?: PageFrame): Buffer {
  const head = frame?.head ?? '';
  const tail = frame?.tail ?? '';
  const headBytes = head.length === 0 ? 0 : Buffer.byteLength(head);
  const tailBytes = tail.length === 0 ? 0 : Buffer.byteLength(tail);
  let size = headBytes + tailBytes + 2 + Math.max(0, rows.length - 1);
  for (let i = 0; i < rows.length; i++) size += rows[i]!.length;
  const out = Buffer.allocUnsafe(size);
  let at = headBytes === 0 ? 0 : out.write(head, 0);
  out[at++] = OPEN;
  let i = 0;
  while (i < rows.length) {
    const first = rows[i]!;
    const bytes = first.bytes;
    let end = first.offset + first.length;
    let j = i + 1;
    while (j < rows.length) {
      const row = rows[j]!;
      if (row.bytes !== bytes || row.offset !== end + 1) break;
      bytes[end] = COMMA;
      end = row.offset + row.length;
      j += 1;
    }
    if (i > 0) out[at++] = COMMA;
    at += bytes.copy(out, at, first.offset, end);
    i = j;
  }
  out[at++] = CLOSE;
  if (tailBytes > 0) out.write(tail, at);
  return out;
}

/** Receives scanned rows in order; returns false to stop the scan. */
type Visit = (row: Row) => boolean;

/** Visits the raw entries of the plan's ranges in scan order; returns false when `visit` stopped it. */
function scanEntries(
  ctx: ReadContext,
  plan: Plan,
  reverse: boolean,
  seek: Buffer | null,
  visit: Visit,
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
    // LMDB's read buffer into the read's arena (it reads as its offset there); no data lookup.
    const db = plan.source.index.scan;
    const { arena } = ctx;
    const iterable = reverse
      ? db.getRange({ start: hi, reverse: true, transaction })
      : db.getRange({ start: lo, end: hi, transaction });
    const covering = ctx.dbs.covering;
    for (const { key, value } of iterable) {
      const bytes = arena.buffer;
      const length = arena.lastLength;
      if (reverse) {
        if (Buffer.compare(key, hi) >= 0) continue;
        if (Buffer.compare(key, lo) < 0) break;
      }
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
function scanRows(
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
  const go = scanEntries(ctx, plan, reverse, seek, (row) => {
    const end = truncatedComponentEnd(row.key, plan.components);
    if (end < 0) {
      if (cluster && !flush()) return false;
      return visit(row);
    }
    const id = row.key.subarray(0, end);
    if (cluster?.id.equals(id)) cluster.items.push(row);
    else {
      if (cluster && !flush()) return false;
      cluster = { id: Buffer.from(id), items: [row] };
    }
    return true;
  });
  if (go && cluster) flush();
}

/**
 * The full sort tuple of a cursor. Abbreviated (long) values are recovered from the record the cursor points at;
 * if that record is gone or changed, a string is replaced by a bound that may repeat records but never skips
 * one (its prefix ascending, its prefix + U+FFFF descending). A lost JSON value expires the cursor.
 */
function cursorTuple(ctx: ReadContext, cursor: DecodedCursor, query: CheckedQuery): unknown[] {
  if (cursor.abbreviated.length === 0) return cursor.tuple;
  const bytes = cursor.dataKey
    ? ctx.dbs.data.get(cursor.dataKey, { transaction: ctx.transaction })
    : undefined;
  if (bytes) {
    const full = sortTuple(decodeRecord(bytes), query.orderBy, ctx.primaryKey);
    if (cursor.abbreviated.every((i) => valueHash(full[i]) === (cursor.tuple[i] as Abbreviated).$h))
      return full;
  }
  const tieDesc = query.orderBy.length > 0 && query.orderBy[query.orderBy.length - 1]!.direction === 'desc';
  return cursor.tuple.map((value, i) => {
    if (!cursor.abbreviated.includes(i)) return value;
    const abbreviated = value as Abbreviated;
    if (abbreviated.$j) throw new CursorExpiredError();
    const desc = i < query.orderBy.length ? query.orderBy[i]!.direction === 'desc' : tieDesc;
    return desc ? `${abbreviated.$p}\uffff\uffff` : abbreviated.$p;
  });
}

/** A page of rows: the records in order, the cursor of the next page, and how it was answered. */
export interface RowPage {
  rows: Row[];
  next: string | null;
  plan: QueryResult['plan'];
}

/**
 * Runs a checked query in one read snapshot. Rows are decoded only where the plan needs their fields: a filter
 * the index does not answer exactly, an in-memory sort, a truncated-key cluster, an `$after` position (until
 * the scan passes it), the `next` cursor (the last row only).
 */
export function runQuery(ctx: ReadContext, query: CheckedQuery): RowPage {
  const { primaryKey } = ctx;
  const order = orderSignature(query.orderBy);
  // Hashing the filter is only needed for cursors (read or written).
  let filterSig: string | null = null;
  const signature = () => (filterSig ??= filterSignature(query.filter));
  const after =
    query.after === null
      ? null
      : cursorTuple(
          ctx,
          decodeCursor(query.after, ctx.cache, order, query.orderBy.length + primaryKey.length, signature()),
          query,
        );
  const plan = planQuery(plannableDbs(ctx.dbs, ctx.transaction), primaryKey, query.filter, query.orderBy);
  const matches = plan.exact ? null : compileFilter(query.filter);
  const compareRecords = recordComparator(query.orderBy, primaryKey);
  const compare = (a: Row, b: Row) => compareRecords(fieldsOf(a), fieldsOf(b));
  const afterCursor = tupleComparator(query.orderBy, primaryKey);
  const cursorOf = (row: Row) =>
    encodeCursor(
      ctx.cache,
      order,
      sortTuple(fieldsOf(row), query.orderBy, primaryKey),
      () => dataKeyOf(ctx, row),
      signature(),
    );
  const reverse = plan.ordered && plan.direction === 'desc';
  const seek = plan.ordered && after ? seekKey(plan, query, primaryKey, after) : null;

  let scanned = 0;
  let capped = false;
  if (plan.ordered) {
    const page: Row[] = [];
    let skipped = 0;
    let more = false;
    let lastExamined: Row | null = null;
    // Rows arrive in the query's order: once one is past the cursor, every later one is too.
    let passed = after === null;
    const { skip, limit } = query;
    const scanCap = ctx.scanCap;
    scanRows(ctx, plan, reverse, seek, compare, (row) => {
      scanned += 1;
      lastExamined = row;
      if (!passed && afterCursor(fieldsOf(row), after!) > 0) passed = true;
      if (passed && (matches === null || matches(fieldsOf(row)))) {
        if (skipped < skip) skipped += 1;
        else if (page.length < limit) page.push(row);
        else {
          more = true;
          return false;
        }
      }
      if (scanned >= scanCap) {
        capped = true;
        return false;
      }
      return true;
    });
    const last = page[page.length - 1];
    let next: string | null = null;
    if (more && last) next = cursorOf(last);
    else if (capped) {
      const from = page.length === query.limit && last ? last : lastExamined;
      next = from ? cursorOf(from) : null;
    }
    return { rows: page, next, plan: { index: plan.name, scanned, capped } };
  }

  const found: Row[] = [];
  scanRows(ctx, plan, false, null, compare, (row) => {
    scanned += 1;
    if (
      (after === null || afterCursor(fieldsOf(row), after) > 0) &&
      (matches === null || matches(fieldsOf(row)))
    )
      found.push(row);
    if (scanned >= ctx.scanCap) {
      capped = true;
      return false;
    }
    return true;
  });
  found.sort(compare);
  const page = found.slice(query.skip, query.skip + query.limit);
  const last = page[page.length - 1];
  // A capped in-memory sort saw only part of the records: no position after it is trustworthy.
  const next = !capped && found.length > query.skip + query.limit && last ? cursorOf(last) : null;
  return { rows: page, next, plan: { index: plan.name, scanned, capped } };
}

/** Counts the records matching a checked filter, using the best index for its bounds. */
export function runCount(ctx: ReadContext, filter: Filter): number {
  const plan = planQuery(plannableDbs(ctx.dbs, ctx.transaction), ctx.primaryKey, filter, []);
  const matches = plan.exact ? null : compileFilter(filter);
  let count = 0;
  scanEntries(ctx, plan, false, null, (row) => {
    if (matches === null || matches(fieldsOf(row))) count += 1;
    return true;
  });
  return count;
}
