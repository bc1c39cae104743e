/**
 * SQLSTATE classes that mean the table refused a row's values, not that the statement or the connection failed:
 * 22 (data exception: a value its column type cannot hold, out of range, too long) and 23 (integrity constraint:
 * NOT NULL, CHECK, a foreign key, a unique index other than the upsert key). Writing the same row again fails the
 * same way, and the other rows of its batch are fine: it is a bad record, not a failed transfer.
 */
const RECORD_REFUSAL_CLASSES = new Set(['22', '23']);

/**
 * Whether `err` from a `pg` statement writing rows means PostgreSQL refused some row's values ({@link
 * RECORD_REFUSAL_CLASSES}) — the sink then finds which rows, one by one, and reports them as bad records.
 *
 * @example
 * ```ts
 * try { await client.query(upsert, [rows]); } catch (err) {
 *   if (isRecordRefusal(err)) await writeOneByOne(rows);
 *   else throw err;
 * }
 * ```
 */
export function isRecordRefusal(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && code.length === 5 && RECORD_REFUSAL_CLASSES.has(code.slice(0, 2));
}

/**
 * The reason a refused row is reported with: PostgreSQL's message, which names the column, type or constraint.
 * Not its `detail`: that quotes the whole failing row, and bad-record reports are logged and kept in results.
 */
export function refusalReason(err: unknown): string {
  return (err as Error).message;
}
