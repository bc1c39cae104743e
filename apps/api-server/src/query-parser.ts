import {
  type Filter,
  filterSchema,
  parseQueryOrThrow,
  type Query,
  type QueryLimits,
  querySchema,
} from '@sluice/core';
import { z } from 'zod';

/** Parsers of query and count bodies under fixed limits. */
export interface QueryParsers {
  /** Same result and errors as core's `parseQuery(input, limits)`. */
  query(input: unknown): Query;
  /** Same result and errors as core's `parseCountQuery(input, limits)`. */
  count(input: unknown): Filter;
}

/**
 * Builds the zod schemas of core's query language once for the server's limits. Core's `parseQuery` builds
 * them on every call, which costs milliseconds per request; parsing with a prebuilt schema costs tens of
 * microseconds. Validation, defaults and error paths are core's (`querySchema`, `filterSchema`).
 *
 * @example
 * ```ts
 * const parsers = createQueryParsers(queryLimitsOf(config));
 * const query = parsers.query({ $filter: { value: { $gte: 10 } }, $limit: 5 });
 * ```
 */
export function createQueryParsers(limits: QueryLimits): QueryParsers {
  const querySchemaOnce = querySchema(limits);
  const countSchemaOnce = z.strictObject({ $filter: filterSchema(limits).optional() });
  return {
    query(input) {
      const wire = parseQueryOrThrow(querySchemaOnce, input ?? {});
      return {
        filter: (wire.$filter ?? {}) as Filter,
        orderBy: Object.entries(wire.$order_by ?? {}).map(([field, direction]) => ({
          field,
          direction: direction as 'asc' | 'desc',
        })),
        limit: wire.$limit ?? limits.defaultLimit,
        skip: wire.$skip ?? 0,
        after: wire.$after ?? null,
      };
    },
    count(input) {
      return (parseQueryOrThrow(countSchemaOnce, input ?? {}).$filter ?? {}) as Filter;
    },
  };
}
