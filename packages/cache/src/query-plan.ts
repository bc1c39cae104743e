import { compareScalars, type Filter, type JsonScalar, type SortDirection } from '@sluice/core';
import type { CacheDbs, IndexDb } from './cache-dbs.js';
import {
  type ComponentRange,
  encodeComponent,
  equalRange,
  isTruncated,
  JsonTextBound,
  lowerBound,
  Tag,
  typeRange,
  upperBound,
} from './key-codec.js';

/** What the filter says about one field, from its top-level (ANDed) conditions only. */
interface FieldBounds {
  eq?: { value: JsonScalar };
  in?: JsonScalar[];
  lowers: Array<{ value: JsonScalar; inclusive: boolean }>;
  uppers: Array<{ value: JsonScalar; inclusive: boolean }>;
  /** How many `$eq` (or bare-value) and `$in` conditions name the field (only the first of each bounds a scan). */
  eqs: number;
  ins: number;
  /** A condition that never bounds a scan (`$ne`, `$contains`, …) names the field. */
  other: boolean;
}

/** A byte range `[lo, hi)` of keys to visit. */
export interface KeyRange {
  lo: Buffer;
  hi: Buffer;
}

/** How a query is executed. */
export interface Plan {
  /** `primary` scans the records by primary key; otherwise the index scanned. */
  source: { kind: 'primary' } | { kind: 'index'; index: IndexDb };
  /** Name reported in `plan.index` (null for a full scan). */
  name: string | null;
  /** Ranges in ascending key order; empty = nothing can match. */
  ranges: KeyRange[];
  /** True when the scan order is the requested order (so a page can stop early). */
  ordered: boolean;
  /** Scan direction when `ordered`. */
  direction: SortDirection;
  /** Leading fields fixed to one exact value (their encoded components prefix every range). */
  fixed: Map<string, JsonScalar>;
  /** Components of the scanned keys (index fields + primary key, or primary key). */
  components: number;
  /** The fields of the scanned keys, in key order (index fields then primary key, or primary key). */
  keyFields: readonly string[];
  /** String budget of the scanned keys' components. */
  budget: number;
  /**
   * True when the scanned ranges are exactly the records the filter matches (every condition is an equality,
   * `$in` or range on a field the key prefix consumes, with no truncated key): records need no re-check.
   */
  exact: boolean;
}

const FF = Buffer.from([0xff]);
const EMPTY = Buffer.alloc(0);

const BOUNDING_OPS = new Set(['$eq', '$in', '$gt', '$gte', '$lt', '$lte']);

/** Collects the bounds of the top-level (ANDed) conditions; returns true when the filter has an `$or`. */
function boundsOf(filter: Filter, out: Map<string, FieldBounds>): boolean {
  let hasOr = false;
  for (const [key, value] of Object.entries(filter)) {
    if (value === undefined) continue;
    if (key === '$or') {
      hasOr = true;
      continue;
    }
    if (key === '$and') {
      for (const sub of value as Filter[]) hasOr = boundsOf(sub, out) || hasOr;
      continue;
    }
    let bounds = out.get(key);
    if (!bounds) {
      bounds = { lowers: [], uppers: [], eqs: 0, ins: 0, other: false };
      out.set(key, bounds);
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      bounds.eq ??= { value: value as JsonScalar };
      bounds.eqs += 1;
      if (Array.isArray(value)) bounds.other = true;
      continue;
    }
    const condition = value as Record<string, unknown>;
    for (const [op, operand] of Object.entries(condition))
      if (operand !== undefined && !BOUNDING_OPS.has(op)) bounds.other = true;
    if (condition.$eq !== undefined) {
      bounds.eq ??= { value: condition.$eq as JsonScalar };
      bounds.eqs += 1;
    }
    if (condition.$in !== undefined) {
      bounds.in ??= condition.$in as JsonScalar[];
      bounds.ins += 1;
    }
    if (condition.$gt !== undefined)
      bounds.lowers.push({ value: condition.$gt as JsonScalar, inclusive: false });
    if (condition.$gte !== undefined)
      bounds.lowers.push({ value: condition.$gte as JsonScalar, inclusive: true });
    if (condition.$lt !== undefined)
      bounds.uppers.push({ value: condition.$lt as JsonScalar, inclusive: false });
    if (condition.$lte !== undefined)
      bounds.uppers.push({ value: condition.$lte as JsonScalar, inclusive: true });
  }
  return hasOr;
}

/** True when `value` encodes to a whole (not truncated) key component. */
function exactComponent(value: unknown, budget: number): boolean {
  return !isTruncated(encodeComponent(value, budget));
}

/** How a candidate's key prefix used a field's conditions. */
type Use = 'fixed' | 'in' | 'range' | 'inexact';

/** True when the key ranges select exactly the values the field's conditions accept. */
function covered(bounds: FieldBounds, use: Use | undefined, budget: number): boolean {
  const ranges = bounds.lowers.length + bounds.uppers.length;
  if (bounds.other) return false;
  if (bounds.eqs === 0 && bounds.ins === 0 && ranges === 0) return true; // constrains nothing
  switch (use) {
    case 'fixed':
      return bounds.eqs === 1 && bounds.ins === 0 && ranges === 0;
    case 'in':
      return (
        bounds.ins === 1 &&
        bounds.eqs === 0 &&
        ranges === 0 &&
        bounds.in!.every((value) => exactComponent(value, budget))
      );
    case 'range':
      return (
        bounds.eqs === 0 &&
        bounds.ins === 0 &&
        [...bounds.lowers, ...bounds.uppers].every((b) => exactComponent(b.value, budget))
      );
    default:
      return false;
  }
}

/** The component interval of a field's range conditions (they compare same-typed values only). */
function rangeInterval(bounds: FieldBounds, budget: number): Array<{ lo: Buffer; hi: Buffer }> {
  // Every operand must have the same type, number or string (a loop, not sets: this runs on every query).
  const first = bounds.lowers[0] ?? bounds.uppers[0];
  if (first === undefined) return [];
  const kind = typeof first.value;
  for (const b of bounds.lowers) if (typeof b.value !== kind) return [];
  for (const b of bounds.uppers) if (typeof b.value !== kind) return [];
  if (kind !== 'number' && kind !== 'string') return [];
  const whole = typeRange(kind === 'number' ? Tag.number : Tag.string);
  let lo = whole.lo;
  let hi = whole.hi;
  for (const lower of bounds.lowers) {
    const at = lowerBound(lower.value, lower.inclusive, budget);
    if (Buffer.compare(at, lo) > 0) lo = at;
  }
  for (const upper of bounds.uppers) {
    const at = upperBound(upper.value, upper.inclusive, budget);
    if (Buffer.compare(at, hi) < 0) hi = at;
  }
  return Buffer.compare(lo, hi) < 0 ? [{ lo, hi }] : [];
}

function inIntervals(values: JsonScalar[], budget: number): Array<{ lo: Buffer; hi: Buffer }> {
  const ranges: ComponentRange[] = [];
  const seen = new Set<string>();
  for (const value of values) {
    const range = equalRange(value, budget);
    const id = range.lo.toString('latin1');
    if (seen.has(id)) continue;
    seen.add(id);
    ranges.push(range);
  }
  ranges.sort((a, b) => Buffer.compare(a.lo, b.lo));
  // Truncated values share cluster ranges; merge overlaps so no key is visited twice.
  const merged: Array<{ lo: Buffer; hi: Buffer }> = [];
  for (const range of ranges) {
    const last = merged[merged.length - 1];
    if (last && Buffer.compare(range.lo, last.hi) < 0) {
      if (Buffer.compare(range.hi, last.hi) > 0) last.hi = range.hi;
    } else merged.push({ lo: range.lo, hi: range.hi });
  }
  return merged;
}

interface Candidate {
  plan: Plan;
  score: number;
}

function candidate(
  source: Plan['source'],
  fields: readonly string[],
  suffix: readonly string[],
  budget: number,
  bounds: Map<string, FieldBounds>,
  hasOr: boolean,
  orderBy: ReadonlyArray<{ field: string; direction: SortDirection }>,
): Candidate {
  let prefixes: Buffer[] = [EMPTY];
  const fixed = new Map<string, JsonScalar>();
  let intervals: Array<{ lo: Buffer; hi: Buffer }> | null = null;
  const uses = new Map<string, Use>();
  for (const field of fields) {
    const b = bounds.get(field);
    if (!b) break;
    if (b.eq) {
      const range = equalRange(b.eq.value, budget);
      if (range.exact) {
        const exact = range.exact;
        prefixes = prefixes.map((p) => Buffer.concat([p, exact]));
        fixed.set(field, b.eq.value);
        uses.set(field, 'fixed');
        continue;
      }
      intervals = [{ lo: range.lo, hi: range.hi }];
      uses.set(field, 'inexact');
      break;
    }
    if (b.in) {
      intervals = inIntervals(b.in, budget);
      uses.set(field, 'in');
      break;
    }
    if (b.lowers.length > 0 || b.uppers.length > 0) {
      intervals = rangeInterval(b, budget);
      uses.set(field, 'range');
    }
    break;
  }
  let exact = !hasOr;
  for (const [field, b] of bounds) if (exact && !covered(b, uses.get(field), budget)) exact = false;
  const ranges: KeyRange[] = [];
  for (const prefix of prefixes) {
    if (intervals === null) ranges.push({ lo: prefix, hi: Buffer.concat([prefix, FF]) });
    else
      for (const interval of intervals)
        ranges.push({ lo: Buffer.concat([prefix, interval.lo]), hi: Buffer.concat([prefix, interval.hi]) });
  }

  // Does the key order give (orderBy values, primary key) in one direction?
  const tieDirection: SortDirection = orderBy.length > 0 ? orderBy[orderBy.length - 1]!.direction : 'asc';
  const moving = orderBy.filter((o) => !fixed.has(o.field));
  const remaining = fields.filter((f) => !fixed.has(f));
  const sameDirection = moving.every((o) => o.direction === tieDirection);
  const movingFields = moving.map((o) => o.field);
  const ordered =
    sameDirection &&
    (source.kind === 'primary'
      ? movingFields.every((f, i) => remaining[i] === f)
      : movingFields.length === remaining.length && movingFields.every((f, i) => remaining[i] === f));

  const bounded = fixed.size > 0 || intervals !== null;
  const score =
    fixed.size * 10 + (intervals !== null ? 5 : 0) + (ordered ? 3 : 0) + (source.kind === 'primary' ? 1 : 0);
  const name = source.kind === 'primary' ? (bounded ? 'primary' : null) : source.index.id;
  return {
    plan: {
      source,
      name: source.kind === 'index' && !bounded && !ordered ? null : name,
      ranges,
      ordered,
      direction: tieDirection,
      fixed,
      components: fields.length + suffix.length,
      keyFields: [...fields, ...suffix],
      budget,
      exact,
    },
    score: source.kind === 'index' && !bounded && !ordered ? -1 : score,
  };
}

/**
 * Chooses how to answer a filter + order: the primary key or the secondary index with the most useful prefix
 * (equality on leading fields, then a range or `$in` on the next one), preferring one whose key order is the
 * requested order. Only top-level (ANDed) conditions bound a scan; everything is re-checked on each record.
 */
export function planQuery(
  dbs: CacheDbs,
  primaryKey: readonly string[],
  filter: Filter,
  orderBy: ReadonlyArray<{ field: string; direction: SortDirection }>,
): Plan {
  const bounds = new Map<string, FieldBounds>();
  const hasOr = boundsOf(filter, bounds);
  let best = candidate({ kind: 'primary' }, primaryKey, [], dbs.keyBudget, bounds, hasOr, orderBy);
  for (const index of dbs.indexes) {
    // An index whose first field is neither bounded nor the first sort field has no usable prefix and no
    // useful order (its candidate would score -1): skip building it.
    const first = index.fields[0]!;
    if (!bounds.has(first) && orderBy[0]?.field !== first) continue;
    const next = candidate(
      { kind: 'index', index },
      index.fields,
      primaryKey,
      index.budget,
      bounds,
      hasOr,
      orderBy,
    );
    if (next.score > best.score) best = next;
  }
  return best.plan;
}

/** Orders records by the requested fields, then by primary key (in the direction of the last sort field). */
export function recordComparator(
  orderBy: ReadonlyArray<{ field: string; direction: SortDirection }>,
  primaryKey: readonly string[],
): (a: Record<string, unknown>, b: Record<string, unknown>) => number {
  const tieSign = orderBy.length > 0 && orderBy[orderBy.length - 1]!.direction === 'desc' ? -1 : 1;
  const parts = [
    ...orderBy.map((o) => ({ field: o.field, sign: o.direction === 'desc' ? -1 : 1 })),
    ...primaryKey.map((field) => ({ field, sign: tieSign })),
  ];
  return (a, b) => {
    for (const part of parts) {
      const c = compareScalars(
        Object.hasOwn(a, part.field) ? a[part.field] : null,
        Object.hasOwn(b, part.field) ? b[part.field] : null,
      );
      if (c !== 0) return c * part.sign;
    }
    return 0;
  };
}

/** The sort tuple of a record: its order values, then its primary key. */
export function sortTuple(
  record: Record<string, unknown>,
  orderBy: ReadonlyArray<{ field: string }>,
  primaryKey: readonly string[],
): unknown[] {
  return [...orderBy.map((o) => o.field), ...primaryKey].map((f) =>
    Object.hasOwn(record, f) ? record[f] : null,
  );
}

/** Compares a record's value with a position's: a value, or a {@link JsonTextBound} (after every scalar). */
function compareToPosition(value: unknown, position: unknown): number {
  if (!(position instanceof JsonTextBound)) return compareScalars(value, position);
  if (value === null || value === undefined || typeof value !== 'object') return -1;
  const text = JSON.stringify(value);
  return text < position.text ? -1 : text > position.text ? 1 : 0;
}

/** Compares a record with a sort tuple in the query's total order. */
export function tupleComparator(
  orderBy: ReadonlyArray<{ field: string; direction: SortDirection }>,
  primaryKey: readonly string[],
): (record: Record<string, unknown>, tuple: readonly unknown[]) => number {
  const tieSign = orderBy.length > 0 && orderBy[orderBy.length - 1]!.direction === 'desc' ? -1 : 1;
  const parts = [
    ...orderBy.map((o) => ({ field: o.field, sign: o.direction === 'desc' ? -1 : 1 })),
    ...primaryKey.map((field) => ({ field, sign: tieSign })),
  ];
  return (record, tuple) => {
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i]!;
      const c = compareToPosition(
        Object.hasOwn(record, part.field) ? record[part.field] : null,
        tuple[i] ?? null,
      );
      if (c !== 0) return c * part.sign;
    }
    return 0;
  };
}
