import { CursorExpiredError, compileFilter, type Filter } from '@sluice/core';
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
import { encodeKey, truncatedComponentEnd } from './key-codec.js';
import type { CheckedQuery } from './query-check.js';
import { type Plan, planQuery, recordComparator, sortTuple, tupleComparator } from './query-plan.js';
import type { QueryResult } from './types.js';

/** What a query runs against: one cache's databases, read in one snapshot. */
export interface ReadContext {
  dbs: CacheDbs;
  cache: string;
  primaryKey: readonly string[];
  transaction: Transaction;
  scanCap: number;
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

/** Raw entries of the plan's ranges in scan order: the record and its scanned key. */
function* entries(
  ctx: ReadContext,
  plan: Plan,
  reverse: boolean,
  seek: Buffer | null,
): Generator<{ key: Buffer; record: Record<string, unknown> }> {
  const ranges = reverse ? [...plan.ranges].reverse() : plan.ranges;
  const { transaction } = ctx;
  for (const range of ranges) {
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
        : ctx.dbs.data.getRange({ start: lo, transaction });
      for (const { key, value } of iterable) {
        if (reverse ? Buffer.compare(key, hi) >= 0 : false) continue;
        if (reverse ? Buffer.compare(key, lo) < 0 : Buffer.compare(key, hi) >= 0) break;
        yield { key, record: value };
      }
    } else {
      const db = plan.source.index.db;
      const iterable = reverse
        ? db.getRange({ start: hi, reverse: true, transaction })
        : db.getRange({ start: lo, transaction });
      for (const { key, value } of iterable) {
        if (reverse ? Buffer.compare(key, hi) >= 0 : false) continue;
        if (reverse ? Buffer.compare(key, lo) < 0 : Buffer.compare(key, hi) >= 0) break;
        const record = ctx.dbs.data.get(value, { transaction });
        if (record !== undefined) yield { key, record };
      }
    }
  }
}

/**
 * Records of the plan in scan order. For ordered scans, runs of keys truncated at the same place (whose order
 * is by hash) are re-sorted by their real values, so the order is exact.
 */
function* records(
  ctx: ReadContext,
  plan: Plan,
  reverse: boolean,
  seek: Buffer | null,
  compare: (a: Record<string, unknown>, b: Record<string, unknown>) => number,
): Generator<Record<string, unknown>> {
  if (!plan.ordered) {
    for (const entry of entries(ctx, plan, reverse, seek)) yield entry.record;
    return;
  }
  let cluster: { id: Buffer; items: Record<string, unknown>[] } | null = null;
  for (const { key, record } of entries(ctx, plan, reverse, seek)) {
    const end = truncatedComponentEnd(key, plan.components);
    if (end < 0) {
      if (cluster) {
        yield* cluster.items.sort(compare);
        cluster = null;
      }
      yield record;
      continue;
    }
    const id = key.subarray(0, end);
    if (cluster?.id.equals(id)) cluster.items.push(record);
    else {
      if (cluster) yield* cluster.items.sort(compare);
      cluster = { id: Buffer.from(id), items: [record] };
    }
  }
  if (cluster) yield* cluster.items.sort(compare);
}

/**
 * The full sort tuple of a cursor. Abbreviated (long) values are recovered from the record the cursor points at;
 * if that record is gone or changed, a string is replaced by a bound that may repeat records but never skips
 * one (its prefix ascending, its prefix + U+FFFF descending). A lost JSON value expires the cursor.
 */
function cursorTuple(ctx: ReadContext, cursor: DecodedCursor, query: CheckedQuery): unknown[] {
  if (cursor.abbreviated.length === 0) return cursor.tuple;
  const record = cursor.dataKey
    ? ctx.dbs.data.get(cursor.dataKey, { transaction: ctx.transaction })
    : undefined;
  if (record) {
    const full = sortTuple(record, query.orderBy, ctx.primaryKey);
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

/** Runs a checked query in one read snapshot. */
export function runQuery(ctx: ReadContext, query: CheckedQuery): QueryResult {
  const { primaryKey } = ctx;
  const order = orderSignature(query.orderBy);
  const filterSig = filterSignature(query.filter);
  const after =
    query.after === null
      ? null
      : cursorTuple(
          ctx,
          decodeCursor(query.after, ctx.cache, order, query.orderBy.length + primaryKey.length, filterSig),
          query,
        );
  const plan = planQuery(ctx.dbs, primaryKey, query.filter, query.orderBy);
  const matches = compileFilter(query.filter);
  const compare = recordComparator(query.orderBy, primaryKey);
  const afterCursor = tupleComparator(query.orderBy, primaryKey);
  const cursorOf = (record: Record<string, unknown>) =>
    encodeCursor(
      ctx.cache,
      order,
      sortTuple(record, query.orderBy, primaryKey),
      dataKey(
        ctx.dbs,
        primaryKey.map((f) => record[f]),
      ),
      filterSig,
    );
  const reverse = plan.ordered && plan.direction === 'desc';
  const seek = plan.ordered && after ? seekKey(plan, query, primaryKey, after) : null;

  let scanned = 0;
  let capped = false;
  if (plan.ordered) {
    const page: Record<string, unknown>[] = [];
    let skipped = 0;
    let more = false;
    let lastExamined: Record<string, unknown> | null = null;
    for (const record of records(ctx, plan, reverse, seek, compare)) {
      scanned += 1;
      lastExamined = record;
      if ((after === null || afterCursor(record, after) > 0) && matches(record)) {
        if (skipped < query.skip) skipped += 1;
        else if (page.length < query.limit) page.push(record);
        else {
          more = true;
          break;
        }
      }
      if (scanned >= ctx.scanCap) {
        capped = true;
        break;
      }
    }
    const last = page[page.length - 1];
    let next: string | null = null;
    if (more && last) next = cursorOf(last);
    else if (capped) {
      const from = page.length === query.limit && last ? last : lastExamined;
      next = from ? cursorOf(from) : null;
    }
    return { records: page, next, plan: { index: plan.name, scanned, capped } };
  }

  const found: Record<string, unknown>[] = [];
  for (const record of records(ctx, plan, false, null, compare)) {
    scanned += 1;
    if ((after === null || afterCursor(record, after) > 0) && matches(record)) found.push(record);
    if (scanned >= ctx.scanCap) {
      capped = true;
      break;
    }
  }
  found.sort(compare);
  const page = found.slice(query.skip, query.skip + query.limit);
  const last = page[page.length - 1];
  // A capped in-memory sort saw only part of the records: no position after it is trustworthy.
  const next = !capped && found.length > query.skip + query.limit && last ? cursorOf(last) : null;
  return { records: page, next, plan: { index: plan.name, scanned, capped } };
}

/** Counts the records matching a checked filter, using the best index for its bounds. */
export function runCount(ctx: ReadContext, filter: Filter): number {
  const plan = planQuery(ctx.dbs, ctx.primaryKey, filter, []);
  const matches = compileFilter(filter);
  let count = 0;
  for (const record of records(ctx, { ...plan, ordered: false }, false, null, () => 0)) {
    if (matches(record)) count += 1;
  }
  return count;
}
