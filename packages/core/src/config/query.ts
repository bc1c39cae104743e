import { z } from 'zod';
import { DEFAULT_QUERY_LIMITS, type QueryLimits } from '../query.js';

/**
 * The widest limits the `query` section takes. An endpoint's configured `filter` is parsed within these (its
 * grammar, in `endpoints.ts`), then held to the limits the file sets (`rules.ts`): the sections parse apart.
 */
export const QUERY_LIMIT_CEILINGS = { maxLimit: 100_000, maxIn: 100_000, maxDepth: 64 } as const;

/** `query`: bounds of every query the api-servers accept (and of filters in tokens and endpoints' `filter`). */
export const QueryConfigSchema = z
  .strictObject({
    /** Largest `$limit`. */
    maxLimit: z
      .number()
      .int()
      .min(1)
      .max(QUERY_LIMIT_CEILINGS.maxLimit)
      .default(DEFAULT_QUERY_LIMITS.maxLimit),
    /** `$limit` of a query without one (never more than `maxLimit`). */
    defaultLimit: z
      .number()
      .int()
      .min(1)
      .max(QUERY_LIMIT_CEILINGS.maxLimit)
      .default(DEFAULT_QUERY_LIMITS.defaultLimit),
    /** Largest `$in` list. */
    maxIn: z.number().int().min(1).max(QUERY_LIMIT_CEILINGS.maxIn).default(DEFAULT_QUERY_LIMITS.maxIn),
    /** Deepest `$and` / `$or` nesting. */
    maxDepth: z
      .number()
      .int()
      .min(1)
      .max(QUERY_LIMIT_CEILINGS.maxDepth)
      .default(DEFAULT_QUERY_LIMITS.maxDepth),
  })
  .prefault({});
export type QueryConfig = z.output<typeof QueryConfigSchema>;

/**
 * The query limits a configuration asks for (a default above the maximum is lowered to it).
 *
 * @example
 * ```ts
 * const limits = queryLimitsOf(config); // { maxLimit, defaultLimit, maxIn, maxDepth, maxSkip }
 * ```
 */
export function queryLimitsOf(config: { query: QueryConfig }): QueryLimits {
  return {
    maxLimit: config.query.maxLimit,
    defaultLimit: Math.min(config.query.defaultLimit, config.query.maxLimit),
    maxIn: config.query.maxIn,
    maxDepth: config.query.maxDepth,
    maxSkip: DEFAULT_QUERY_LIMITS.maxSkip,
  };
}
