import type { Row } from '../ops.js';
import { quoteIdent } from '../pg.js';
import type { SinkColumns } from './postgres-columns.js';

/**
 * Which inserted columns `row` gives a value (`null` is a value: SQL NULL), as a string of `1`/`0` per column of
 * `columns.inserted`: records with the same signature are upserted by one statement. The key columns always count
 * as given: a record lacking one is refused for its NULL key, never inserted under a default (a `serial` key would
 * make a new row on every run of the transfer).
 */
export function columnSignature(row: Row, columns: SinkColumns, key: readonly string[]): string {
  let signature = '';
  for (const { name } of columns.inserted)
    signature += key.includes(name) || Object.hasOwn(row, name) ? '1' : '0';
  return signature;
}

/** The two spellings of one upsert (see {@link upsertStatements}). */
export interface UpsertStatements {
  /** For records whose keys are distinct to PostgreSQL: each becomes one proposed row. */
  distinct: string;
  /**
   * For records of which several may be one key to PostgreSQL: each key's last record becomes its proposed row.
   * Costs a sort of the batch, so it is run only when `distinct` fails with `21000` (cardinality_violation).
   */
  lastOfEachKey: string;
}

/**
 * The statements that upsert a JSON array (`$1`) of records of one {@link columnSignature} into `table` (quoted).
 *
 * - A column the records lack takes its default, on insert and on update (`EXCLUDED` is the proposed row, defaults
 *   included), and NULL when it has none: the records are whole rows as an `INSERT` naming their fields makes them.
 *   Every column was listed before, so a lacking one was written NULL, and a `NOT NULL DEFAULT …` column (a
 *   `loaded_at` the destination adds) refused every record. A numbering column (identity, `serial`) the records
 *   lack keeps its number on update.
 * - Later records for one key win, and `ON CONFLICT` cannot touch a row twice. Which records share a key is
 *   PostgreSQL's to say, by the key columns' types (1 and "1" are one `int`; 1.5 and "1.50" one `numeric`; 'eu'
 *   and 'eu ' one `char(3)`): the sink's own dedupe compares JSON, so such records both reached the `INSERT` and
 *   failed the whole transfer; `lastOfEachKey` is the spelling that lets PostgreSQL pick. A record with a NULL key
 *   column shares its key with none.
 *
 * @example
 * ```ts
 * const sql = upsertStatements('"orders_copy"', columns, ['id'], columnSignature(record, columns, ['id']));
 * await client.query(sql.distinct, [JSON.stringify(records)]);
 * ```
 */
export function upsertStatements(
  table: string,
  columns: SinkColumns,
  key: readonly string[],
  signature: string,
): UpsertStatements {
  const given = columns.inserted.filter((_, i) => signature[i] === '1').map((c) => c.name);
  const givenSet = new Set(given);
  const field = (column: string) => `(r).${quoteIdent(column)}`;
  const keyFields = key.map(field);
  const updates = columns.updatable
    .filter((column) => !key.includes(column))
    .filter((column) => givenSet.has(column) || !columns.numbering.has(column))
    .map((column) => `${quoteIdent(column)} = EXCLUDED.${quoteIdent(column)}`);
  const insert = `INSERT INTO ${table} (${given.map(quoteIdent).join(', ')})${
    columns.overridesIdentity ? ' OVERRIDING SYSTEM VALUE' : ''
  }`;
  const onConflict = `ON CONFLICT (${key.map(quoteIdent).join(', ')})
    DO ${updates.length > 0 ? `UPDATE SET ${updates.join(', ')}` : 'NOTHING'}`;
  const cols = given.map(quoteIdent).join(', ');
  return {
    distinct: `${insert} SELECT ${cols} FROM json_populate_recordset(NULL::${table}, $1::json) ${onConflict}`,
    lastOfEachKey: `WITH sluice_batch AS (
        SELECT json_populate_record(NULL::${table}, e.doc) AS r, e.n
          FROM json_array_elements($1::json) WITH ORDINALITY AS e(doc, n)
      ), sluice_latest AS (
        SELECT r FROM (
          SELECT r, row_number() OVER (PARTITION BY ${keyFields.join(', ')} ORDER BY n DESC) AS sluice_rank
            FROM sluice_batch) AS ranked
         WHERE sluice_rank = 1 OR ${keyFields.map((f) => `${f} IS NULL`).join(' OR ')}
      )
      ${insert} SELECT ${given.map(field).join(', ')} FROM sluice_latest ${onConflict}`,
  };
}
