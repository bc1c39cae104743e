import type pg from 'pg';

/**
 * Why the PostgreSQL sink cannot upsert into `table` by `key`, or null: a key column the table does not have, or no
 * unique index on exactly the key's columns (`INSERT … ON CONFLICT (key)` needs one as its arbiter: not partial,
 * not on expressions, not deferrable). Checked when the sink opens, before any record is read: a missing column
 * made every record a bad record ("missing primary key field") and the transfer COMPLETED having written nothing,
 * and a key without an index failed only at the first write.
 *
 * @example
 * ```ts
 * const problem = await upsertKeyProblem(client, 'orders_copy', ['id'], new Set(['id', 'total']));
 * if (problem) throw new SinkError(problem);
 * ```
 */
export async function upsertKeyProblem(
  client: pg.Client,
  table: string,
  regclass: string,
  key: string[],
  columns: ReadonlySet<string>,
): Promise<string | null> {
  const missing = key.filter((column) => !columns.has(column));
  if (missing.length > 0)
    return `key column(s) ${missing.join(', ')} are not columns of table ${table} (its columns: ${[...columns].join(', ')})`;
  const result = await client.query(
    `SELECT 1 FROM pg_index i
      WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indimmediate
        AND i.indpred IS NULL AND i.indexprs IS NULL
        AND (SELECT array_agg(a.attname::text ORDER BY a.attname::text) FROM pg_attribute a
              WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)) = $2::text[]
      LIMIT 1`,
    [regclass, [...new Set(key)].sort()],
  );
  if (result.rowCount === 0)
    return `no unique index on (${key.join(', ')}) of table ${table}: an upsert by key needs one (a primary key or a unique constraint on exactly those columns)`;
  return null;
}
