import { z } from 'zod';
import { filterConditions, MAX_FILTER_CONDITIONS, TOO_MANY_CONDITIONS } from './filter-size.js';
import { FORBIDDEN_KEYS, type JsonScalar, JsonScalarSchema, refuseProtoKey } from './json.js';
import { shapedWireQuery } from './shaped-query.js';
import { canonicalTimestamp } from './timestamp.js';
import { parseQueryOrThrow } from './validation.js';

/** Limits applied to every query; the api-server takes them from configuration. */
export interface QueryLimits {
  /** Largest `$limit` accepted. */
  maxLimit: number;
  /** `$limit` when none is given. */
  defaultLimit: number;
  /** Largest `$in` list. */
  maxIn: number;
  /** Deepest nesting of `$and` / `$or`. */
  maxDepth: number;
  /** Largest `$skip`. */
  maxSkip: number;
}

export const DEFAULT_QUERY_LIMITS: QueryLimits = {
  maxLimit: 1000,
  defaultLimit: 50,
  maxIn: 1000,
  maxDepth: 8,
  maxSkip: 100_000,
};

export const COMPARISON_OPERATORS = ['$eq', '$ne', '$lt', '$lte', '$gt', '$gte', '$in', '$contains'] as const;
export type ComparisonOperator = (typeof COMPARISON_OPERATORS)[number];

/** Operators on one field; several are ANDed. */
export interface FieldCondition {
  $eq?: JsonScalar;
  $ne?: JsonScalar;
  $lt?: JsonScalar;
  $lte?: JsonScalar;
  $gt?: JsonScalar;
  $gte?: JsonScalar;
  $in?: JsonScalar[];
  $contains?: JsonScalar;
}

/** A filter: field conditions (a bare value means `$eq`) and `$and` / `$or` lists. */
export interface Filter {
  $and?: Filter[];
  $or?: Filter[];
  [field: string]: JsonScalar | FieldCondition | Filter[] | undefined;
}

export type SortDirection = 'asc' | 'desc';

/** A parsed query, with defaults applied. */
export interface Query {
  filter: Filter;
  orderBy: Array<{ field: string; direction: SortDirection }>;
  limit: number;
  skip: number;
  after: string | null;
}

/**
 * Whether the query language can name `field` in `$filter` / `$order_by`: 1 to 256 characters, not starting with `$`
 * (that reads as an operator) and not a reserved key (`__proto__`, `constructor`, `prototype`). A record may still
 * hold a field of any other name (a PostgreSQL column `$x`): it is served, but not queryable.
 *
 * @example
 * ```ts
 * isQueryableFieldName('a.b'); // true
 * isQueryableFieldName('$x'); // false
 * isQueryableFieldName('constructor'); // false
 * ```
 */
export function isQueryableFieldName(field: string): boolean {
  return field.length >= 1 && field.length <= 256 && !field.startsWith('$') && !FORBIDDEN_KEYS.has(field);
}

const FieldNameSchema = z
  .string()
  .min(1)
  .max(256)
  .refine((f) => !f.startsWith('$'), { message: 'unknown operator' })
  .refine((f) => !FORBIDDEN_KEYS.has(f), { message: 'reserved field name' });

function conditionSchema(limits: QueryLimits) {
  return z.strictObject({
    $eq: JsonScalarSchema.optional(),
    $ne: JsonScalarSchema.optional(),
    $lt: JsonScalarSchema.optional(),
    $lte: JsonScalarSchema.optional(),
    $gt: JsonScalarSchema.optional(),
    $gte: JsonScalarSchema.optional(),
    $in: z.array(JsonScalarSchema).max(limits.maxIn, `at most ${limits.maxIn} values`).optional(),
    $contains: JsonScalarSchema.optional(),
  });
}

/** The zod schema of a filter under the given limits (nesting depth is checked while parsing). */
export function filterSchema(limits: QueryLimits = DEFAULT_QUERY_LIMITS): z.ZodType<Filter> {
  const condition = conditionSchema(limits);
  // One schema per nesting depth, built once: rebuilding zod schemas on every parse dominated query cost.
  const byDepth = new Map<number, z.ZodType<Filter>>();
  const build = (depth: number): z.ZodType<Filter> => {
    const cached = byDepth.get(depth);
    if (cached) return cached;
    const schema = buildAt(depth);
    byDepth.set(depth, schema);
    return schema;
  };
  const lists = new Map<number, z.ZodType>();
  const listAt = (depth: number): z.ZodType => {
    let list = lists.get(depth);
    if (!list) {
      list = z.array(build(depth)).min(1).max(256);
      lists.set(depth, list);
    }
    return list;
  };
  const buildAt = (depth: number): z.ZodType<Filter> =>
    z.lazy(() =>
      refuseProtoKey(z.record(z.string(), z.unknown()), 'reserved field name').superRefine((obj, ctx) => {
        // Counted on the raw input before anything is parsed: parsing a filter of tens of thousands of conditions
        // only to refuse it cost seconds too.
        if (depth === 0 && filterConditions(obj, limits.maxDepth) > MAX_FILTER_CONDITIONS) {
          ctx.addIssue({ code: 'custom', message: TOO_MANY_CONDITIONS });
          return;
        }
        const keys = Object.keys(obj);
        if (keys.length > 256)
          ctx.addIssue({ code: 'custom', message: 'at most 256 keys in one filter object' });
        for (const key of keys) {
          const value = obj[key];
          if (key === '$and' || key === '$or') {
            if (depth >= limits.maxDepth) {
              ctx.addIssue({
                code: 'custom',
                path: [key],
                message: `nesting deeper than ${limits.maxDepth}`,
              });
              continue;
            }
            const list = listAt(depth + 1).safeParse(value);
            if (!list.success) {
              for (const issue of list.error.issues)
                ctx.addIssue({ ...issue, path: [key, ...issue.path] } as never);
            }
            continue;
          }
          if (key.startsWith('$')) {
            ctx.addIssue({ code: 'custom', path: [key], message: `unknown operator "${key.slice(0, 64)}"` });
            continue;
          }
          const name = FieldNameSchema.safeParse(key);
          if (!name.success) {
            ctx.addIssue({
              code: 'custom',
              path: [key.slice(0, 64)],
              message: name.error.issues[0]?.message ?? 'bad field',
            });
            continue;
          }
          const isObject = typeof value === 'object' && value !== null && !Array.isArray(value);
          if (isObject && Object.keys(value).length === 0) {
            // `{"price": {}}` would otherwise match every record: refuse it rather than guess what was meant.
            ctx.addIssue({ code: 'custom', path: [key], message: 'expected at least one operator' });
            continue;
          }
          const parsed = isObject ? condition.safeParse(value) : JsonScalarSchema.safeParse(value);
          if (!parsed.success) {
            for (const issue of parsed.error.issues) {
              const message =
                issue.code === 'unrecognized_keys'
                  ? `unknown operator ${issue.keys.map((k) => `"${k.slice(0, 64)}"`).join(', ')}`
                  : isObject || issue.code !== 'invalid_union'
                    ? issue.message
                    : 'expected a string, number, boolean, null or an operator object';
              ctx.addIssue({ code: 'custom', path: [key, ...issue.path], message });
            }
          }
        }
      }),
    ) as unknown as z.ZodType<Filter>;
  return build(0);
}

/** Why `$limit: 0` is refused: the smallest page is one record, and a count is what counts. */
export const LIMIT_AT_LEAST_ONE = 'must be at least 1 (count the matching records with POST /count)';

/** The zod schema of a wire query (`$filter`, `$order_by`, `$limit`, `$skip` | `$after`). */
export function querySchema(limits: QueryLimits = DEFAULT_QUERY_LIMITS) {
  return z
    .strictObject({
      $filter: filterSchema(limits).optional(),
      $order_by: refuseProtoKey(
        z
          .record(FieldNameSchema, z.enum(['asc', 'desc']))
          .refine((o) => Object.keys(o).length <= 8, { message: 'at most 8 sort fields' }),
        'reserved field name',
      ).optional(),
      // At least 1: an empty page answers nothing a count does not, and it cannot both say "more records
      // follow" (a cursor after no records pages forever) and be true when it says "none" (`next: null`).
      $limit: z
        .number()
        .int()
        .min(1, LIMIT_AT_LEAST_ONE)
        .max(limits.maxLimit, `must be at most ${limits.maxLimit}`)
        .optional(),
      $skip: z.number().int().min(0).max(limits.maxSkip, `must be at most ${limits.maxSkip}`).optional(),
      $after: z.string().min(1).max(4096).optional(),
    })
    .refine((q) => q.$skip === undefined || q.$after === undefined, {
      message: '"$skip" and "$after" cannot be combined',
      path: ['$after'],
    });
}

/** The wire form of a query. */
export type WireQuery = z.input<ReturnType<typeof querySchema>>;

const parsers = new Map<
  string,
  { query: ReturnType<typeof querySchema>; count: z.ZodType; filter: z.ZodType }
>();

/** The schemas for one set of limits, built once and reused (limits come from configuration, so few exist). */
function parsersFor(limits: QueryLimits) {
  const key = `${limits.maxLimit}/${limits.defaultLimit}/${limits.maxIn}/${limits.maxDepth}/${limits.maxSkip}`;
  let entry = parsers.get(key);
  if (!entry) {
    const filter = filterSchema(limits);
    entry = { query: querySchema(limits), count: z.strictObject({ $filter: filter.optional() }), filter };
    if (parsers.size > 64) parsers.clear();
    parsers.set(key, entry);
  }
  return entry;
}

/**
 * Parses an untrusted wire query into a {@link Query}, throwing `INVALID_QUERY` with the failing path.
 *
 * @example
 * ```ts
 * const q = parseQuery({ $filter: { value: { $gte: 10, $lt: 20 } }, $order_by: { value: 'asc' }, $limit: 5 });
 * ```
 */
export function parseQuery(input: unknown, limits: QueryLimits = DEFAULT_QUERY_LIMITS): Query {
  // The hand-written check accepts what the schema accepts, at a fraction of its cost; the rest (every
  // invalid query included) goes through the schema, which names the failing path.
  const wire =
    shapedWireQuery(input ?? {}, limits) ?? parseQueryOrThrow(parsersFor(limits).query, input ?? {});
  return {
    filter: (wire.$filter ?? {}) as Filter,
    orderBy: Object.entries(wire.$order_by ?? {}).map(([field, direction]) => ({ field, direction })),
    limit: wire.$limit ?? limits.defaultLimit,
    skip: wire.$skip ?? 0,
    after: wire.$after ?? null,
  };
}

/** Parses the body of a count request (`{"$filter": ...}`). */
export function parseCountQuery(input: unknown, limits: QueryLimits = DEFAULT_QUERY_LIMITS): Filter {
  const parsed = parseQueryOrThrow(parsersFor(limits).count, input ?? {}) as { $filter?: Filter };
  return parsed.$filter ?? {};
}

/** Parses a filter alone (configuration, token row filters). */
export function parseFilter(input: unknown, limits: QueryLimits = DEFAULT_QUERY_LIMITS): Filter {
  return parseQueryOrThrow(parsersFor(limits).filter, input) as Filter;
}

/** Type-aware ordering: null < booleans < numbers < strings. Returns -1, 0 or 1. */
export function compareScalars(a: unknown, b: unknown): number {
  const rank = (v: unknown) =>
    v === null || v === undefined
      ? 0
      : typeof v === 'boolean'
        ? 1
        : typeof v === 'number'
          ? 2
          : typeof v === 'string'
            ? 3
            : 4;
  const ra = rank(a);
  const rb = rank(b);
  if (ra !== rb) return ra < rb ? -1 : 1;
  if (ra === 0) return 0;
  if (ra === 4) {
    const sa = JSON.stringify(a);
    const sb = JSON.stringify(b);
    return sa < sb ? -1 : sa > sb ? 1 : 0;
  }
  return (a as number) < (b as number) ? -1 : (a as number) > (b as number) ? 1 : 0;
}

function sameType(a: unknown, b: unknown): boolean {
  return (
    typeof a === typeof b && a !== null && b !== null && (typeof a === 'number' || typeof a === 'string')
  );
}

function equals(a: unknown, b: unknown): boolean {
  return (a === undefined ? null : a) === b;
}

type ValueTest = (value: unknown) => boolean;

/** One operator of a field condition as a test of the field's value. */
function operatorTest(op: string, operand: unknown): ValueTest {
  switch (op as ComparisonOperator) {
    case '$eq':
      return (value) => equals(value, operand);
    case '$ne':
      return (value) => !equals(value, operand);
    case '$lt':
      return (value) => sameType(value, operand) && (value as number) < (operand as number);
    case '$lte':
      return (value) => sameType(value, operand) && (value as number) <= (operand as number);
    case '$gt':
      return (value) => sameType(value, operand) && (value as number) > (operand as number);
    case '$gte':
      return (value) => sameType(value, operand) && (value as number) >= (operand as number);
    case '$in': {
      // Looked up, not searched: a list costs one check per record whatever its length (scalars, where a Set's
      // SameValueZero is `===`; operands are finite numbers, never NaN).
      const candidates = new Set(operand as JsonScalar[]);
      return (value) => candidates.has((value === undefined ? null : value) as JsonScalar);
    }
    case '$contains':
      return (value) => {
        if (typeof value === 'string' && typeof operand === 'string') return value.includes(operand);
        if (Array.isArray(value)) return value.some((item) => equals(item, operand));
        return false;
      };
    default:
      return () => false;
  }
}

/**
 * A field condition as its operators: a bare value means `$eq` (the one place that says so; the compiler and
 * {@link canonicalFilter} both read conditions through it).
 */
function conditionOperators(condition: FieldCondition | JsonScalar): FieldCondition {
  return condition === null || typeof condition !== 'object' ? { $eq: condition } : condition;
}

/** A field condition (a bare value, or operators ANDed) as one test of the field's value, built once per filter. */
function conditionTest(condition: FieldCondition | JsonScalar): ValueTest {
  const tests: ValueTest[] = [];
  for (const [op, operand] of Object.entries(conditionOperators(condition))) {
    // An absent operator (`{ $eq: undefined }` built in code) constrains nothing, as an absent field does.
    if (operand === undefined) continue;
    tests.push(operatorTest(op, operand));
  }
  if (tests.length === 1) return tests[0]!;
  return (value) => {
    for (const test of tests) if (!test(value)) return false;
    return true;
  };
}

/**
 * One spelling of `filter` for the conditions {@link compileFilter} treats alike, so that two spellings of one
 * filter compare (and hash) equal: a field condition whose only operator is `$eq` is its bare value
 * (`{"a": {"$eq": 1}}` is `{"a": 1}`), in `$and` / `$or` too; operators left undefined are dropped. Nothing else
 * is folded (key order is canonical JSON's job). Input that is no valid filter is left as it is where it is not one
 * (it is refused when checked).
 *
 * @example
 * ```ts
 * canonicalFilter({ category: { $eq: 'a' }, $or: [{ value: { $eq: 1 } }, { value: { $gt: 5 } }] });
 * // { category: 'a', $or: [{ value: 1 }, { value: { $gt: 5 } }] }
 * ```
 */
export function canonicalFilter(filter: Filter): Filter {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(filter)) {
    if (value === undefined) continue;
    if ((key === '$and' || key === '$or') && Array.isArray(value)) {
      out[key] = value.map((sub: unknown) => (isFilterObject(sub) ? canonicalFilter(sub) : sub));
      continue;
    }
    out[key] = Array.isArray(value) ? value : canonicalCondition(value as FieldCondition | JsonScalar);
  }
  return out as Filter;
}

function isFilterObject(value: unknown): value is Filter {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A field condition in {@link canonicalFilter}'s spelling: a lone `$eq` of a scalar as its bare value. */
function canonicalCondition(condition: FieldCondition | JsonScalar): FieldCondition | JsonScalar {
  const operators = Object.entries(conditionOperators(condition)).filter(
    ([, operand]) => operand !== undefined,
  );
  const [op, operand] = operators[0] ?? [];
  const scalar = operand === null || typeof operand !== 'object';
  if (operators.length === 1 && op === '$eq' && scalar) return operand as JsonScalar;
  return Object.fromEntries(operators) as FieldCondition;
}

/** Operators whose operand is a value of the field (`$contains` matches a part of it). */
const VALUE_OPERATORS = new Set(['$eq', '$ne', '$in', '$lt', '$lte', '$gt', '$gte']);

/** A timestamp operand in the canonical form; one that is not a timestamp (or null) is left as it is. */
function canonicalOperand(operand: unknown): unknown {
  return operand === null ? null : (canonicalTimestamp(operand) ?? operand);
}

/**
 * `filter` with the operands of the fields `isTimestamp` names in {@link canonicalTimestamp}'s form, so that they
 * compare with canonical values as instants (text order is time order there). Copies what it changes only.
 *
 * @example
 * ```ts
 * canonicalTimestampOperands({ ts: { $gte: '2026-01-01T09:00:00+09:00' } }, (f) => f === 'ts');
 * // { ts: { $gte: '2026-01-01T00:00:00.000000Z' } }
 * ```
 */
export function canonicalTimestampOperands(filter: Filter, isTimestamp: (field: string) => boolean): Filter {
  let out: Record<string, unknown> | null = null;
  const set = (key: string, value: unknown) => {
    out ??= { ...filter };
    out[key] = value;
  };
  for (const [key, value] of Object.entries(filter)) {
    if (value === undefined) continue;
    if (key === '$and' || key === '$or') {
      const subs = value as Filter[];
      const next = subs.map((sub) => canonicalTimestampOperands(sub, isTimestamp));
      if (next.some((sub, i) => sub !== subs[i])) set(key, next);
      continue;
    }
    if (!isTimestamp(key)) continue;
    if (value === null || typeof value !== 'object') {
      set(key, canonicalOperand(value));
      continue;
    }
    const condition: Record<string, unknown> = { ...(value as Record<string, unknown>) };
    for (const [op, operand] of Object.entries(condition)) {
      if (operand === undefined || !VALUE_OPERATORS.has(op)) continue;
      condition[op] = op === '$in' ? (operand as unknown[]).map(canonicalOperand) : canonicalOperand(operand);
    }
    set(key, condition);
  }
  return (out ?? filter) as Filter;
}

/** What a timestamp field's value that is not one compares as: unequal to, and unordered with, every operand. */
const NOT_A_TIMESTAMP = Symbol('not a timestamp');

/** How {@link compileFilter} reads values. */
export interface CompileFilterOptions {
  /**
   * Fields holding timestamps in any spelling (a file's offsets, PostgreSQL's session zone): their values and
   * operands are compared as instants ({@link canonicalTimestamp}). Not needed where values are canonical already
   * and operands were canonicalized (the cache's queries).
   */
  timestampFields?: ReadonlySet<string>;
}

/**
 * Compiles a parsed filter into a predicate over records. Semantics (shared by the cache planner and the
 * pipeline's filter processor): a missing field equals `null`; range operators compare numbers with numbers
 * and strings with strings only; `$contains` is substring on strings and membership on arrays.
 *
 * @example
 * ```ts
 * const keep = compileFilter({ category: { $ne: 'hidden' }, value: { $gte: 10 } });
 * keep({ category: 'a', value: 12 }); // true
 * ```
 */
export function compileFilter(
  filter: Filter,
  options: CompileFilterOptions = {},
): (record: Record<string, unknown>) => boolean {
  const timestamps = options.timestampFields;
  if (timestamps === undefined || timestamps.size === 0) return compileParts(filter, null);
  return compileParts(
    canonicalTimestampOperands(filter, (field) => timestamps.has(field)),
    timestamps,
  );
}

function compileParts(
  filter: Filter,
  timestamps: ReadonlySet<string> | null,
): (record: Record<string, unknown>) => boolean {
  const parts: Array<(record: Record<string, unknown>) => boolean> = [];
  for (const [key, value] of Object.entries(filter)) {
    if (value === undefined) continue;
    if (key === '$and') {
      const subs = (value as Filter[]).map((sub) => compileParts(sub, timestamps));
      parts.push((r) => subs.every((f) => f(r)));
    } else if (key === '$or') {
      const subs = (value as Filter[]).map((sub) => compileParts(sub, timestamps));
      parts.push((r) => subs.some((f) => f(r)));
    } else {
      const test = conditionTest(value as FieldCondition | JsonScalar);
      if (timestamps?.has(key))
        parts.push((r) => {
          const raw = Object.hasOwn(r, key) ? r[key] : undefined;
          // A value that is no timestamp equals and orders with nothing (the cache refuses it as a bad record).
          return test(raw == null ? raw : (canonicalTimestamp(raw) ?? NOT_A_TIMESTAMP));
        });
      else parts.push((r) => test(Object.hasOwn(r, key) ? r[key] : undefined));
    }
  }
  return (record) => parts.every((p) => p(record));
}

/** ANDs filters together (e.g. a token's row filter into a user's query). */
export function andFilters(...filters: Array<Filter | undefined>): Filter {
  const present = filters.filter((f): f is Filter => f !== undefined && Object.keys(f).length > 0);
  if (present.length === 0) return {};
  if (present.length === 1) return present[0]!;
  return { $and: present };
}
