import { ValidationError } from '@sluice/core';

/**
 * The first query parameter of `query` (a request's parsed query string) sent more than once, or null. Every query
 * parameter of both apps takes one value; the parser hands a repeated one over as a list, which the route's schema
 * then refused in words about something else ("expected number, received NaN" for `limit=5&limit=6`).
 *
 * @example
 * ```ts
 * repeatedQueryParameter({ limit: ['5', '6'] }); // 'limit'
 * repeatedQueryParameter({ limit: '5' }); // null
 * ```
 */
export function repeatedQueryParameter(query: unknown): string | null {
  if (typeof query !== 'object' || query === null) return null;
  for (const [name, value] of Object.entries(query)) if (Array.isArray(value)) return name;
  return null;
}

/**
 * The refusal of a request that sends a query parameter more than once (400 `VALIDATION_FAILED` at
 * `querystring.<name>`), or null: the problem-details plugin applies it to every request, before any route's schema.
 *
 * @example
 * ```ts
 * const problem = queryParametersProblem(request.query);
 * if (problem) throw problem;
 * ```
 */
export function queryParametersProblem(query: unknown): ValidationError | null {
  const repeated = repeatedQueryParameter(query);
  if (repeated === null) return null;
  const name = repeated.slice(0, 64);
  return new ValidationError(`Send the query parameter "${name}" once`, [
    { path: `querystring.${name}`, message: 'sent more than once' },
  ]);
}
