/**
 * A fast acceptance check for wire queries and filters, run before the zod schemas of `query.ts`: most queries a
 * server sees are well formed, and checking them by hand costs a fraction of a zod parse (which dominated the
 * cache's per-query work). The check is never looser than the schemas: whatever it accepts they accept with the
 * same meaning; anything it does not recognize (including every invalid input) goes to the schemas, which
 * produce the precise errors.
 */
import { MAX_FILTER_CONDITIONS } from './filter-size.js';
import { FORBIDDEN_KEYS } from './json.js';
import type { Filter, QueryLimits } from './query.js';

const OPERATORS: ReadonlySet<string> = new Set([
  '$eq',
  '$ne',
  '$lt',
  '$lte',
  '$gt',
  '$gte',
  '$in',
  '$contains',
]);
const WIRE_KEYS: ReadonlySet<string> = new Set(['$filter', '$order_by', '$limit', '$skip', '$after']);
const MAX_FILTER_KEYS = 256;
const MAX_LIST = 256;
const MAX_STRING = 65_536;
const MAX_SORT_FIELDS = 8;
const MAX_CURSOR = 4096;

/** A plain object (JSON's or `{}`'s), without an own `__proto__` key. */
function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return (proto === Object.prototype || proto === null) && !Object.hasOwn(value, '__proto__');
}

function isScalar(value: unknown): boolean {
  switch (typeof value) {
    case 'string':
      return value.length <= MAX_STRING;
    case 'number':
      return Number.isFinite(value);
    case 'boolean':
      return true;
    default:
      return value === null;
  }
}

function isFieldName(key: string): boolean {
  return key.length >= 1 && key.length <= 256 && key.charCodeAt(0) !== 0x24 && !FORBIDDEN_KEYS.has(key);
}

/** Conditions a filter holds so far, as `filter-size.ts` counts them. */
interface Tally {
  conditions: number;
}

/** The number of operators of a valid condition object (each one condition), or 0 when it is not one. */
function conditionOperators(value: Record<string, unknown>, maxIn: number): number {
  let operators = 0;
  for (const op in value) {
    if (!Object.hasOwn(value, op) || !OPERATORS.has(op)) return 0;
    operators += 1;
    const operand = value[op];
    if (operand === undefined) continue;
    if (op === '$in') {
      if (!Array.isArray(operand) || operand.length > maxIn) return 0;
      for (let i = 0; i < operand.length; i++) if (!isScalar(operand[i])) return 0;
    } else if (!isScalar(operand)) return 0;
  }
  return operators;
}

function isFilter(value: unknown, limits: QueryLimits, depth: number, tally: Tally): value is Filter {
  if (!isPlainObject(value)) return false;
  let keys = 0;
  for (const key in value) {
    if (!Object.hasOwn(value, key)) return false;
    if (++keys > MAX_FILTER_KEYS) return false;
    const item = value[key];
    if (key === '$and' || key === '$or') {
      if (depth >= limits.maxDepth || !Array.isArray(item) || item.length < 1 || item.length > MAX_LIST)
        return false;
      tally.conditions += item.length;
      if (tally.conditions > MAX_FILTER_CONDITIONS) return false;
      for (let i = 0; i < item.length; i++) if (!isFilter(item[i], limits, depth + 1, tally)) return false;
      continue;
    }
    if (!isFieldName(key)) return false;
    if (isPlainObject(item)) {
      const operators = conditionOperators(item, limits.maxIn);
      if (operators === 0) return false;
      tally.conditions += operators;
    } else if (!isScalar(item)) return false;
    else tally.conditions += 1;
    if (tally.conditions > MAX_FILTER_CONDITIONS) return false;
  }
  return true;
}

/**
 * The filter as the filter schema would return it (a shallow copy), when `input` is certainly valid under
 * `limits`; otherwise null (parse it with the schema, which names what is wrong).
 *
 * @example
 * ```ts
 * shapedFilter({ value: { $gte: 10 } }, DEFAULT_QUERY_LIMITS); // { value: { $gte: 10 } }
 * shapedFilter({ value: { $regex: 'x' } }, DEFAULT_QUERY_LIMITS); // null
 * ```
 */
export function shapedFilter(input: unknown, limits: QueryLimits): Filter | null {
  return isFilter(input, limits, 0, { conditions: 0 }) ? { ...input } : null;
}

function isBoundedInteger(value: unknown, max: number): boolean {
  return Number.isSafeInteger(value) && (value as number) >= 0 && (value as number) <= max;
}

/** The checked parts of a wire query the fast path accepted. */
export interface ShapedWireQuery {
  $filter: Filter | undefined;
  $order_by: Record<string, 'asc' | 'desc'> | undefined;
  $limit: number | undefined;
  $skip: number | undefined;
  $after: string | undefined;
}

/**
 * The parts of a wire query (`$filter`, `$order_by`, `$limit`, `$skip` | `$after`) when `input` is certainly
 * valid under `limits`; otherwise null (parse it with the query schema, which names what is wrong).
 *
 * @example
 * ```ts
 * shapedWireQuery({ $filter: { id: 1 }, $limit: 5 }, DEFAULT_QUERY_LIMITS)?.$limit; // 5
 * ```
 */
export function shapedWireQuery(input: unknown, limits: QueryLimits): ShapedWireQuery | null {
  if (!isPlainObject(input)) return null;
  for (const key in input) if (!Object.hasOwn(input, key) || !WIRE_KEYS.has(key)) return null;
  const { $filter, $order_by, $limit, $skip, $after } = input;
  let filter: Filter | undefined;
  if ($filter !== undefined) {
    const shaped = shapedFilter($filter, limits);
    if (shaped === null) return null;
    filter = shaped;
  }
  if ($order_by !== undefined) {
    if (!isPlainObject($order_by)) return null;
    let fields = 0;
    for (const field in $order_by) {
      if (!Object.hasOwn($order_by, field) || !isFieldName(field) || ++fields > MAX_SORT_FIELDS) return null;
      const direction = $order_by[field];
      if (direction !== 'asc' && direction !== 'desc') return null;
    }
  }
  if ($limit !== undefined && (!isBoundedInteger($limit, limits.maxLimit) || $limit === 0)) return null;
  if ($skip !== undefined && !isBoundedInteger($skip, limits.maxSkip)) return null;
  if ($after !== undefined && (typeof $after !== 'string' || $after.length < 1 || $after.length > MAX_CURSOR))
    return null;
  if ($skip !== undefined && $after !== undefined) return null;
  return {
    $filter: filter,
    $order_by: $order_by as Record<string, 'asc' | 'desc'> | undefined,
    $limit: $limit as number | undefined,
    $skip: $skip as number | undefined,
    $after: $after as string | undefined,
  };
}
