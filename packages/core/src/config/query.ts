import { z } from 'zod';
import { DEFAULT_QUERY_LIMITS, type QueryLimits } from '../query.js';

/** `query`: bounds of every query the api-servers accept (and of filters in tokens). */
export const QueryConfigSchema = z
  .strictObject({
    /** Largest `$limit`. */
    maxLimit: z.number().int().min(1).max(100_000).default(DEFAULT_QUERY_LIMITS.maxLimit),
    /** `$limit` of a query without one (never more than `maxLimit`). */
    defaultLimit: z.number().int().min(1).max(100_000).default(DEFAULT_QUERY_LIMITS.defaultLimit),
    /** Largest `$in` list. */
    maxIn: z.number().int().min(1).max(100_000).default(DEFAULT_QUERY_LIMITS.maxIn),
    /** Deepest `$and` / `$or` nesting. */
    maxDepth: z.number().int().min(1).max(64).default(DEFAULT_QUERY_LIMITS.maxDepth),
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
