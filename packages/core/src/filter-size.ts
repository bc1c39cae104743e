/**
 * How big a `$filter` may be. A filter is checked against every record a query, a count or a change feed examines,
 * so its size multiplies the work of a request: within a 1 MiB body, `$and` / `$or` lists nested a few levels deep
 * hold tens of thousands of conditions, and one such query held an api-server for a minute. The bound counts what a
 * record is checked against; `$in` is one condition however long its list (it is looked up, not searched).
 */

/** The most conditions one filter may hold: each operator or bare value of a field, each `$and` / `$or` item. */
export const MAX_FILTER_CONDITIONS = 1024;

/** The refusal of a filter over {@link MAX_FILTER_CONDITIONS} (at the filter's own path). */
export const TOO_MANY_CONDITIONS = `more than ${MAX_FILTER_CONDITIONS} conditions (each operator or bare value of a field, each $and / $or item): use $in for a list of values`;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The conditions of an unchecked filter as {@link MAX_FILTER_CONDITIONS} counts them, walking at most `maxDepth`
 * levels of `$and` / `$or` (deeper is refused anyway) and stopping once past `stopAbove`: a cheap look at any input,
 * made before a schema walks it all.
 *
 * @example
 * ```ts
 * filterConditions({ a: 1, b: { $gte: 1, $lt: 5 }, $or: [{ c: 1 }, { d: 2 }] }, 8); // 1 + 2 + (1 + 1) + (1 + 1) = 7
 * ```
 */
export function filterConditions(
  filter: unknown,
  maxDepth: number,
  stopAbove = MAX_FILTER_CONDITIONS,
): number {
  let count = 0;
  const walk = (node: Record<string, unknown>, depth: number): void => {
    for (const key in node) {
      if (!Object.hasOwn(node, key)) continue;
      const value = node[key];
      if (key === '$and' || key === '$or') {
        if (!Array.isArray(value)) continue;
        for (const item of value) {
          count += 1;
          if (count > stopAbove) return;
          if (isObject(item) && depth < maxDepth) walk(item, depth + 1);
          if (count > stopAbove) return;
        }
      } else if (key.charCodeAt(0) !== 0x24 /* $ */) {
        if (isObject(value)) {
          for (const op in value) if (Object.hasOwn(value, op)) count += 1;
        } else count += 1;
        if (count > stopAbove) return;
      }
    }
  };
  if (isObject(filter)) walk(filter, 0);
  return count;
}
