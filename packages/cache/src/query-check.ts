import {
  andFilters,
  type CacheSchema,
  canonicalTimestamp,
  canonicalTimestampOperands,
  DEFAULT_QUERY_LIMITS,
  type FieldIssue,
  type FieldType,
  type Filter,
  filterSchema,
  InvalidQueryError,
  issuesOf,
  type JsonScalar,
  type Query,
  type QueryLimits,
  type ReadScope,
  type SortDirection,
  shapedFilter,
} from '@sluice/core';
import { z } from 'zod';
import { timestampFields } from './schema.js';

/** A query after checking it against a cache's schema and limits. */
export interface CheckedQuery {
  filter: Filter;
  orderBy: Array<{ field: string; direction: SortDirection }>;
  limit: number;
  skip: number;
  after: string | null;
}

const OrderBySchema = z
  .array(z.strictObject({ field: z.string().min(1).max(256), direction: z.enum(['asc', 'desc']) }))
  .max(8);

function fail(issues: FieldIssue[]): never {
  const first = issues[0]!;
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more)` : '';
  throw new InvalidQueryError(`Invalid query: ${first.path}: ${first.message}${more}`, issues);
}

type Kind = 'string' | 'number' | 'boolean' | 'null' | 'other';

function kindOf(value: unknown): Kind {
  if (value === null) return 'null';
  if (typeof value === 'string') return 'string';
  if (typeof value === 'number') return 'number';
  if (typeof value === 'boolean') return 'boolean';
  return 'other';
}

/** Scalar kinds a field of each type can hold (what `$eq`, `$ne`, `$in` may compare it with). */
const EQUAL_KINDS: Record<FieldType, ReadonlySet<Kind>> = {
  string: new Set(['string', 'null']),
  integer: new Set(['number', 'null']),
  number: new Set(['number', 'null']),
  boolean: new Set(['boolean', 'null']),
  timestamp: new Set(['string', 'number', 'null']),
  json: new Set(['string', 'number', 'boolean', 'null']),
};

/** Kinds a range operator (`$lt` …) may use on each type; booleans have no order to range over. */
const RANGE_KINDS: Record<FieldType, ReadonlySet<Kind>> = {
  string: new Set(['string']),
  integer: new Set(['number']),
  number: new Set(['number']),
  boolean: new Set(),
  timestamp: new Set(['string', 'number']),
  json: new Set(['string', 'number']),
};

const RANGE_OPS = new Set(['$lt', '$lte', '$gt', '$gte']);

const NOT_A_TIMESTAMP =
  'expected an ISO 8601 timestamp (e.g. "2026-12-05T23:33:49.737Z"; no zone means UTC) or epoch milliseconds';

const NOT_AN_INTEGER = `expected an integer from ${-Number.MAX_SAFE_INTEGER} to ${Number.MAX_SAFE_INTEGER}`;

/**
 * Whether an operand of the right kind is also a value of the field: a timestamp must denote an instant; an
 * integer field's operand must be a safe integer where it is compared for equality (`$eq`, a bare value, `$ne`,
 * each `$in` item: `{"id": 1.5}` can never match and is the caller's mistake, as `/records/1.5` is a 400) and
 * within ±(2^53 − 1) everywhere. A range bound may have a fraction — `{"$lt": 1.5}` is a valid comparison (id ≤ 1)
 * — but not beyond the safe integers: JSON.parse has already rounded `12345678901234567890` to another number, so
 * the comparison would not be the one the caller wrote, and no stored integer is there (the pipeline refuses
 * integers it cannot hold exactly, and a lookup URL refuses them).
 */
function checkValue(
  path: string,
  type: FieldType,
  operand: unknown,
  issues: FieldIssue[],
  equality: boolean,
): void {
  if (type === 'timestamp' && operand !== null && canonicalTimestamp(operand) === null)
    issues.push({ path, message: NOT_A_TIMESTAMP });
  else if (type === 'integer' && typeof operand === 'number') {
    const fits = equality ? Number.isSafeInteger(operand) : Math.abs(operand) <= Number.MAX_SAFE_INTEGER; // also refuses NaN (a hand-built Query)
    if (!fits) issues.push({ path, message: `${NOT_AN_INTEGER}, got ${operand}` });
  }
}

function checkCondition(path: string, type: FieldType, condition: unknown, issues: FieldIssue[]): void {
  if (condition === null || typeof condition !== 'object') {
    if (!EQUAL_KINDS[type].has(kindOf(condition)))
      issues.push({ path, message: `expected a ${type} value, got ${kindOf(condition)}` });
    else checkValue(path, type, condition, issues, true);
    return;
  }
  for (const [op, operand] of Object.entries(condition as Record<string, unknown>)) {
    const at = `${path}.${op}`;
    if (op === '$eq' || op === '$ne') {
      if (!EQUAL_KINDS[type].has(kindOf(operand)))
        issues.push({ path: at, message: `expected a ${type} value, got ${kindOf(operand)}` });
      else checkValue(at, type, operand, issues, true);
    } else if (op === '$in') {
      (operand as unknown[]).forEach((value, i) => {
        if (!EQUAL_KINDS[type].has(kindOf(value)))
          issues.push({ path: `${at}[${i}]`, message: `expected a ${type} value, got ${kindOf(value)}` });
        else checkValue(`${at}[${i}]`, type, value, issues, true);
      });
    } else if (RANGE_OPS.has(op)) {
      if (!RANGE_KINDS[type].has(kindOf(operand)))
        issues.push({
          path: at,
          message:
            type === 'boolean'
              ? `${op} cannot be used on a boolean field`
              : `expected a ${type} value, got ${kindOf(operand)}`,
        });
      else checkValue(at, type, operand, issues, false);
    } else if (op === '$contains') {
      const ok = type === 'string' ? typeof operand === 'string' : type === 'json';
      if (!ok)
        issues.push({
          path: at,
          message:
            type === 'string'
              ? `expected a string, got ${kindOf(operand)}`
              : `$contains needs a string or json field, "${path.split('.').pop()}" is ${type}`,
        });
    }
  }
}

function checkFields(filter: Filter, schema: CacheSchema, path: string, issues: FieldIssue[]): void {
  for (const [key, value] of Object.entries(filter)) {
    if (value === undefined) continue;
    if (key === '$and' || key === '$or') {
      (value as Filter[]).forEach((sub, i) => {
        checkFields(sub, schema, `${path}.${key}[${i}]`, issues);
      });
      continue;
    }
    const type = Object.hasOwn(schema.fields, key) ? schema.fields[key] : undefined;
    if (type === undefined) {
      issues.push({ path: `${path}.${key.slice(0, 64)}`, message: `unknown field "${key.slice(0, 64)}"` });
      continue;
    }
    checkCondition(`${path}.${key}`, type, value, issues);
  }
}

/**
 * Checks a parsed query against a schema and limits: the filter's shape and limits (again, since a `Query` may
 * be built by hand), every field known, every operand of the field's type, limit/skip in range; then ANDs the
 * scope's row filter, checked on its own ({@link scopedFilter}), into the filter it answers.
 * Throws `INVALID_QUERY` naming each failing path.
 */
export function checkQuery(
  input: Partial<Query> | null | undefined,
  schema: CacheSchema,
  limits: { defaultLimit: number; maxLimit: number } & Partial<Pick<QueryLimits, 'maxIn' | 'maxDepth'>>,
  scope: ReadScope = {},
): CheckedQuery {
  if (typeof input !== 'object' || input === null) fail([{ path: '(root)', message: 'expected a query' }]);
  const filter = scopedFilter(input.filter ?? {}, schema, limits, scope);
  const issues: FieldIssue[] = [];
  let orderBy = shapedOrderBy(input.orderBy ?? []);
  if (orderBy === null) {
    const parsed = OrderBySchema.safeParse(input.orderBy ?? []);
    if (!parsed.success) fail(issuesOf(parsed.error, ['$order_by']));
    orderBy = parsed.data;
  }
  const seen = new Set<string>();
  for (const { field } of orderBy) {
    if (!Object.hasOwn(schema.fields, field))
      issues.push({
        path: `$order_by.${field.slice(0, 64)}`,
        message: `unknown field "${field.slice(0, 64)}"`,
      });
    if (seen.has(field)) issues.push({ path: `$order_by.${field}`, message: 'listed twice' });
    seen.add(field);
  }
  const limit = input.limit ?? limits.defaultLimit;
  // From 1, as the wire schema says: an empty page with `next: null` would read as "no such records".
  if (!Number.isInteger(limit) || limit < 1 || limit > limits.maxLimit)
    issues.push({ path: '$limit', message: `must be an integer from 1 to ${limits.maxLimit}` });
  const skip = input.skip ?? 0;
  if (!Number.isInteger(skip) || skip < 0 || skip > DEFAULT_QUERY_LIMITS.maxSkip)
    issues.push({ path: '$skip', message: `must be an integer from 0 to ${DEFAULT_QUERY_LIMITS.maxSkip}` });
  const after = input.after ?? null;
  if (after !== null && typeof after !== 'string') issues.push({ path: '$after', message: 'not a cursor' });
  if (after !== null && skip > 0)
    issues.push({ path: '$after', message: '"$skip" and "$after" cannot be combined' });
  if (issues.length > 0) fail(issues);
  return { filter, orderBy, limit, skip, after };
}

/**
 * A copy of `input` when it is certainly what {@link OrderBySchema} accepts (the common case, checked by hand at
 * a fraction of a zod parse); otherwise null, and the schema names what is wrong.
 */
function shapedOrderBy(input: unknown): CheckedQuery['orderBy'] | null {
  if (!Array.isArray(input) || input.length > 8) return null;
  const out: CheckedQuery['orderBy'] = [];
  for (const item of input) {
    if (typeof item !== 'object' || item === null || Object.getPrototypeOf(item) !== Object.prototype)
      return null;
    const { field, direction } = item as { field?: unknown; direction?: unknown };
    if (Object.keys(item).length !== 2 || typeof field !== 'string' || field.length < 1 || field.length > 256)
      return null;
    if (direction !== 'asc' && direction !== 'desc') return null;
    out.push({ field, direction });
  }
  return out;
}

const schemas = new Map<string, ReturnType<typeof filterSchema>>();

/** Building a filter schema is costly; build one per distinct set of limits. */
function filterSchemaFor(limits: QueryLimits): ReturnType<typeof filterSchema> {
  const id = `${limits.maxIn}/${limits.maxDepth}`;
  let schema = schemas.get(id);
  if (!schema) {
    schema = filterSchema(limits);
    if (schemas.size < 16) schemas.set(id, schema);
  }
  return schema;
}

/**
 * Checks a `$filter` alone against an endpoint's schema — shape, limits, fields, operand types — as a query's
 * is checked; throws `INVALID_QUERY` with a path per problem, under `at`: where the filter sits in the request
 * (`$filter` in a query body; a filter sent as a parameter names the parameter, e.g. `querystring.filter`).
 *
 * @example
 * ```ts
 * const filter = checkFilter({ category: 'a', value: { $gte: 10 } }, cache.schema);
 * checkFilter({ nope: 1 }, cache.schema); // throws INVALID_QUERY: $filter.nope: unknown field "nope"
 * checkFilter({ nope: 1 }, cache.schema, {}, 'querystring.filter'); // … querystring.filter.nope: unknown field …
 * ```
 */
export function checkFilter(
  filter: unknown,
  schema: CacheSchema,
  limits: Partial<QueryLimits> = {},
  at = '$filter',
): Filter {
  return checkFilterAt(at, filter, schema, limits);
}

/**
 * Checks a row filter ({@link ReadScope}) against an endpoint's schema — fields and operand types, as a `$filter`
 * is — naming its mistakes at `rowFilter.…`. Its shape is held to `limits` but one level deeper: a row filter is
 * the AND of a token's claims, each checked against the limits where the token was read.
 *
 * @example
 * ```ts
 * checkRowFilter({ $and: [{ region: 'eu' }, { value: { $gte: 0 } }] }, cache.schema);
 * checkRowFilter({ nope: 1 }, cache.schema); // throws INVALID_QUERY: rowFilter.nope: unknown field "nope"
 * ```
 */
export function checkRowFilter(
  rowFilter: unknown,
  schema: CacheSchema,
  limits: Partial<QueryLimits> = {},
): Filter {
  const maxDepth = (limits.maxDepth ?? DEFAULT_QUERY_LIMITS.maxDepth) + 1;
  return checkFilterAt('rowFilter', rowFilter, schema, { maxIn: limits.maxIn, maxDepth });
}

/**
 * The filter a query or count reads with: the caller's `$filter` and the scope's row filter, each checked on its
 * own (the caller's limits and paths are the caller's whatever the row filter is), then ANDed.
 */
export function scopedFilter(
  filter: unknown,
  schema: CacheSchema,
  limits: Partial<QueryLimits>,
  scope: ReadScope,
): Filter {
  const checked = checkFilter(filter, schema, limits);
  if (scope.rowFilter === undefined) return checked;
  return andFilters(checked, checkRowFilter(scope.rowFilter, schema, limits));
}

function checkFilterAt(
  at: string,
  filter: unknown,
  schema: CacheSchema,
  limits: Partial<QueryLimits>,
): Filter {
  // Only the filter limits matter here (a handle's settings carry more, which a spread would copy per query).
  const all: QueryLimits = {
    ...DEFAULT_QUERY_LIMITS,
    maxIn: limits.maxIn ?? DEFAULT_QUERY_LIMITS.maxIn,
    maxDepth: limits.maxDepth ?? DEFAULT_QUERY_LIMITS.maxDepth,
  };
  let shaped = shapedFilter(filter ?? {}, all);
  if (shaped === null) {
    // Not certainly valid: the schema names what is wrong (or accepts what the fast check does not know).
    const parsed = filterSchemaFor(all).safeParse(filter ?? {});
    if (!parsed.success) fail(issuesOf(parsed.error, [at]));
    shaped = parsed.data;
  }
  const issues: FieldIssue[] = [];
  checkFields(shaped, schema, at, issues);
  if (issues.length > 0) fail(issues);
  // Checked above: every timestamp operand is one, so all of them canonicalize.
  return timestampFields(schema).length === 0
    ? shaped
    : canonicalTimestampOperands(shaped, (field) => schema.fields[field] === 'timestamp');
}

/** Narrowing helper for conditions: the scalar operands of a field condition. */
export type Operand = JsonScalar;
