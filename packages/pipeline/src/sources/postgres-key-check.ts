import { SourceError } from '@sluice/core';
import type pg from 'pg';
import { quoteIdent } from '../pg.js';

/**
 * Why the rows of `relation` cannot be paged by `key`, or null: a key value two rows share, or a row whose key
 * is NULL. The snapshot pages by keyset (`WHERE (key) > (last) ORDER BY key LIMIT n`): rows sharing the last key
 * of a page are never read, and a NULL key is greater than nothing — such rows were skipped silently and the
 * transfer COMPLETED. One statement (a grouping over the relation) that names the first offending key.
 *
 * @example
 * ```ts
 * const problem = await keysetProblem(run, '(SELECT * FROM orders) AS q', ['customer_id']);
 * if (problem) throw new SourceError(problem);
 * ```
 */
export async function keysetProblem(
  run: (sql: string, params: unknown[]) => Promise<pg.QueryResult>,
  relation: string,
  key: string[],
): Promise<string | null> {
  const columns = key.map(quoteIdent);
  const texts = columns.map((c, i) => `${c}::text AS "k${i}"`).join(', ');
  const nulls = columns.map((c) => `${c} IS NULL`).join(' OR ');
  const result = await run(
    `SELECT ${texts}, count(*)::bigint::text AS n, (${nulls}) AS has_null FROM ${relation}
     GROUP BY ${columns.join(', ')} HAVING count(*) > 1 OR ${nulls} LIMIT 1`,
    [],
  );
  const row = result.rows[0] as Record<string, string | boolean | null> | undefined;
  if (!row) return null;
  const named = key.join(', ');
  if (row.has_null === true)
    return `key (${named}) is NULL in ${row.n === '1' ? 'a row' : `${row.n} rows`}; name a key that is unique and never NULL`;
  const value = key.map((k, i) => `${k} = ${String(row[`k${i}`])}`).join(', ');
  return `key (${named}) is not unique: ${row.n} rows have ${value}; paging by it would skip rows — name a key that is unique and never NULL`;
}

/** A {@link keysetProblem} as the transfer's failure: not retryable, as the rows stay what they are. */
export function keysetError(handle: string, problem: string): SourceError {
  return new SourceError(`PostgreSQL source ${handle}: ${problem}`, {
    details: { reason: 'key-cannot-page' },
  });
}
