/**
 * Runs a checked query or count in one read snapshot: plans it, scans the plan (query-scan.ts), filters what the
 * index does not answer exactly, sorts when the scan is not in the query's order, and writes the `next` cursor.
 */
import { compileFilter, type Filter, InvalidQueryError, type QueryResult } from '@sluice/core';
import { dataKey } from './cache-dbs.js';
import { logSequenceIn, recordAtSequence } from './change-log.js';
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
import { JsonTextBound } from './key-codec.js';
import type { CheckedQuery } from './query-check.js';
import { type Plan, planQuery, recordComparator, sortTuple, tupleComparator } from './query-plan.js';
import { fieldsOf, type Row } from './query-rows.js';
import { type ReadContext, scanEntries, scanRows, seekKey } from './query-scan.js';
import { decodeRecord } from './record-json.js';

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

/**
 * The full sort tuple of a cursor. Abbreviated (long) values are recovered from the record the cursor points at, as
 * it was when the cursor was cut: the stored record while its values still hash alike, else what the record's first
 * change since that snapshot replaced (the change log keeps it) — so a walk goes on exactly after a position whose
 * record was deleted or changed meanwhile. Only once the log no longer reaches back that far is an abbreviated value
 * replaced by a bound that may repeat records but never skips one (its prefix ascending, its prefix + U+FFFF
 * descending; for a JSON value, a bound on its JSON text).
 */
function cursorTuple(ctx: ReadContext, cursor: DecodedCursor, query: CheckedQuery): unknown[] {
  if (cursor.abbreviated.length === 0) return cursor.tuple;
  const recovered = recoveredTuple(ctx, cursor, query);
  if (recovered !== null) return recovered;
  const tieDesc = query.orderBy.length > 0 && query.orderBy[query.orderBy.length - 1]!.direction === 'desc';
  return cursor.tuple.map((value, i) => {
    if (!cursor.abbreviated.includes(i)) return value;
    const abbreviated = value as Abbreviated;
    const desc = i < query.orderBy.length ? query.orderBy[i]!.direction === 'desc' : tieDesc;
    const bound = desc ? `${abbreviated.$p}\uffff\uffff` : abbreviated.$p;
    return abbreviated.$j ? new JsonTextBound(bound) : bound;
  });
}

/**
 * The cursor's tuple with its abbreviated values taken from the record it points at as that record was when the
 * cursor was cut (each checked against its hash), or null when neither the data nor the change log holds it. Only the
 * abbreviated values are taken: the others are the cursor's own, whatever the record holds now.
 */
function recoveredTuple(ctx: ReadContext, cursor: DecodedCursor, query: CheckedQuery): unknown[] | null {
  const key = cursor.dataKey;
  if (key === null) return null;
  const fill = (bytes: Uint8Array | undefined): unknown[] | null => {
    if (bytes === undefined) return null;
    const full = sortTuple(decodeRecord(bytes), query.orderBy, ctx.primaryKey);
    for (const i of cursor.abbreviated)
      if (valueHash(full[i]) !== (cursor.tuple[i] as Abbreviated).$h) return null;
    return cursor.tuple.map((value, i) => (cursor.abbreviated.includes(i) ? full[i] : value));
  };
  const stored = fill(ctx.dbs.data.get(key, { transaction: ctx.transaction }));
  if (stored !== null || cursor.logSequence === null || !ctx.logReady) return stored;
  const isKey = (pk: readonly unknown[]) => dataKey(ctx.dbs, pk).equals(key);
  return fill(recordAtSequence(ctx.dbs, ctx.transaction, cursor.logSequence, isKey));
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
          decodeCursor(
            query.after,
            ctx.cache,
            order,
            [...query.orderBy.map((term) => term.field), ...primaryKey].map((field) => ctx.fields[field]),
            signature(),
          ),
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
      () => logSequenceIn(ctx.dbs, ctx.transaction),
    );
  /** A page read through `ordered` (a plan in the query's order), each row checked with `check` when not null. */
  const orderedPage = (
    ordered: Plan,
    check: ((record: Record<string, unknown>) => boolean) | null,
  ): RowPage => {
    const reverse = ordered.direction === 'desc';
    const seek = after ? seekKey(ordered, query, primaryKey, after) : null;
    let scanned = 0;
    let capped = false;
    const page: Row[] = [];
    let skipped = 0;
    let more = false;
    let lastExamined: Row | null = null;
    // Rows arrive in the query's order: once one is past the cursor, every later one is too.
    let passed = after === null;
    const { skip, limit } = query;
    const scanCap = ctx.scanCap;
    scanRows(ctx, ordered, reverse, seek, compare, (row) => {
      // Rows up to the $after position are passed over uncounted: the scan starts at the position (`seekKey`), so
      // they are at most the run of truncated keys holding it, which the scan reads whole anyway. Counted, a run at
      // least `cache.scanCap` long stopped every page before the position, and the `next` of the last row examined
      // pointed back at where the page started: the walk went on with empty pages forever.
      if (!passed) {
        if (afterCursor(fieldsOf(row), after!) <= 0) return true;
        passed = true;
      }
      scanned += 1;
      lastExamined = row;
      if (check === null || check(fieldsOf(row))) {
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
    return { rows: page, next, plan: { index: ordered.name, scanned, capped } };
  };
  if (plan.ordered) return orderedPage(plan, matches);

  let scanned = 0;
  let capped = false;
  const found: Row[] = [];
  scanRows(ctx, plan, false, null, compare, (row) => {
    // A record beyond the cap: the sort would not see every record it orders.
    if (scanned === ctx.scanCap) {
      capped = true;
      return false;
    }
    scanned += 1;
    if (
      (after === null || afterCursor(fieldsOf(row), after) > 0) &&
      (matches === null || matches(fieldsOf(row)))
    )
      found.push(row);
    return true;
  });
  if (capped) {
    // Records it did not see may come first: no page of an in-memory sort would be right. A plan already in the
    // query's order (the primary key's, or an index in that order) pages through the records checking each against the
    // filter, within the cap per page — the planner preferred an index that bounds the filter, but it cannot order.
    const inOrder = planQuery(plannableDbs(ctx.dbs, ctx.transaction), primaryKey, {}, query.orderBy);
    if (inOrder.ordered) return orderedPage(inOrder, compileFilter(query.filter));
    throw sortBeyondScanCap(query, ctx.scanCap);
  }
  found.sort(compare);
  const page = found.slice(query.skip, query.skip + query.limit);
  const last = page[page.length - 1];
  const next = found.length > query.skip + query.limit && last ? cursorOf(last) : null;
  return { rows: page, next, plan: { index: plan.name, scanned, capped } };
}

/**
 * The refusal of a query sorted in memory whose scan stopped at the cap: it names the order, the cap and the two
 * ways out (an index in that order, or a filter an index narrows), as an INVALID_QUERY at `$order_by`.
 */
function sortBeyondScanCap(query: CheckedQuery, scanCap: number): InvalidQueryError {
  const fields = query.orderBy.map((term) => term.field);
  const message =
    `no index of this endpoint gives the order ${fields.join(', ')}, and the records to sort are more than ` +
    `cache.scanCap (${scanCap}): add an index [${fields.join(', ')}], or a $filter an index narrows to at most ` +
    `${scanCap} records`;
  return new InvalidQueryError(`Invalid query: $order_by: ${message}`, [{ path: '$order_by', message }]);
}

/**
 * Counts the records matching a checked filter, using the best index for its bounds. Ranges an index answers exactly
 * are counted by LMDB without a record being read. A filter that leaves records to check examines at most
 * `ctx.scanCap` of them, as a query's scan does, and gives up beyond (null; a count has no `next` to go on from): a
 * count that checked every record of a big endpoint one by one held the api-server — every other request — for the
 * whole scan (seconds at millions of records).
 */
export function runCount(ctx: ReadContext, filter: Filter): number | null {
  const plan = planQuery(plannableDbs(ctx.dbs, ctx.transaction), ctx.primaryKey, filter, []);
  // A format-2 generation's index entries point at data entries a scan re-reads: counted through the scan below.
  if (plan.exact && (plan.source.kind === 'primary' || ctx.dbs.covering)) return countRanges(ctx, plan);
  const matches = plan.exact ? null : compileFilter(filter);
  const scanCap = ctx.scanCap;
  let count = 0;
  let examined = 0;
  const complete = scanEntries(ctx, plan, false, null, (row) => {
    if (matches === null) {
      count += 1;
      return true;
    }
    if (examined === scanCap) return false;
    examined += 1;
    if (matches(fieldsOf(row))) count += 1;
    return true;
  });
  return complete ? count : null;
}

/** The entries of an exact plan's ranges, counted by LMDB (no entry is read into JavaScript). */
function countRanges(ctx: ReadContext, plan: Plan): number {
  const db = plan.source.kind === 'primary' ? ctx.dbs.data : plan.source.index.scan;
  let count = 0;
  for (const { lo, hi } of plan.ranges) {
    if (Buffer.compare(lo, hi) >= 0) continue;
    count += db.getCount({ start: lo, end: hi, transaction: ctx.transaction });
  }
  return count;
}

/**
 * The refusal of a count whose records to check are more than the cap: it names the cap and the way out (an index
 * that narrows the filter), as an INVALID_QUERY at `$filter`.
 */
export function countBeyondScanCap(scanCap: number): InvalidQueryError {
  // The fields are not named: the filter checked here includes a token's row filter, which is not the caller's to see.
  const message =
    `no index of this endpoint narrows this $filter to at most cache.scanCap (${scanCap}) records, and a count ` +
    'checks every record its filter leaves: add an index on a field the filter bounds, or narrow the $filter with ' +
    'an indexed field';
  return new InvalidQueryError(`Invalid query: $filter: ${message}`, [{ path: '$filter', message }]);
}
