import { SourceError } from '@sluice/core';
import type pg from 'pg';

/**
 * The record fields of a PostgreSQL source's rows: the names of the columns its table or query returns, each once.
 * A query may return two columns of one name (`SELECT a.name, b.name …`); `pg` hands rows over as objects, which
 * keep only the last of them, so the other was dropped from every record without a word and the transfer
 * COMPLETED. Such a result is refused instead, naming the columns (not retryable: the query stays what it is).
 *
 * `appended` is how many columns the source's own statement adds after `*` (its key and cursor texts): they are
 * checked too, so a column of the relation that happens to carry one of their names is refused, not overwritten.
 *
 * @throws SourceError (`SOURCE_FAILED`, `details.columns`) when a name occurs more than once.
 * @example
 * ```ts
 * const result = await client.query(`SELECT *, id::text AS "__sluice_k0" FROM (${query}) AS q`);
 * const fields = recordFields('orders.source', result.fields, 1); // ['id', 'total', …]
 * ```
 */
export function recordFields(
  handle: string,
  fields: ReadonlyArray<Pick<pg.FieldDef, 'name'>>,
  appended: number,
): string[] {
  const seen = new Set<string>();
  const repeated = new Set<string>();
  for (const { name } of fields) {
    if (seen.has(name)) repeated.add(name);
    seen.add(name);
  }
  if (repeated.size > 0) {
    const names = [...repeated];
    throw new SourceError(
      `PostgreSQL source ${handle}: the result has more than one column named ${names
        .map((n) => JSON.stringify(n))
        .join(', ')}; a record holds one field per name, so give each column its own name (AS …)`,
      { details: { columns: names } },
    );
  }
  return fields.slice(0, fields.length - appended).map((f) => f.name);
}
