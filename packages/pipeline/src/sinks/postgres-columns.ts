import type pg from 'pg';

/** One column of the PostgreSQL sink's table, as its upsert writes it. */
export interface SinkColumn {
  name: string;
  typeOid: number;
}

/** The columns of the PostgreSQL sink's table, by what its upsert may do with them. */
export interface SinkColumns {
  /** Every column: a record field naming one is no unknown field (a generated one is computed, not refused). */
  names: string[];
  /** The columns the `INSERT` lists: all but stored generated ones, which take no value but their expression's. */
  inserted: SinkColumn[];
  /**
   * The columns `ON CONFLICT … DO UPDATE` sets, before the key is left out: the inserted ones but identity columns
   * `GENERATED ALWAYS`, which an `UPDATE` may set to `DEFAULT` only (so an update keeps the row's number).
   */
  updatable: string[];
  /** Whether the `INSERT` needs `OVERRIDING SYSTEM VALUE`: a column is an identity `GENERATED ALWAYS`. */
  overridesIdentity: boolean;
  /**
   * Columns that number rows (identity columns, and defaults drawing from a sequence: `serial`): when a record lacks
   * one, an update keeps the row's number instead of drawing a new one.
   */
  numbering: ReadonlySet<string>;
}

/**
 * Reads the columns of `regclass` (quoted) as the sink writes them. Listing every column made each write fail as
 * a whole (`428C9`, cannot insert a non-DEFAULT value into column …) into a table with a generated column or an
 * identity `GENERATED ALWAYS` — a copy of such a table into one like it never worked. Stored generated columns are
 * left to their expression; identity values are written as the record has them (`OVERRIDING SYSTEM VALUE`), so
 * a copy keeps its source's numbers.
 *
 * @example
 * ```ts
 * const columns = await readSinkColumns(client, '"public"."orders_copy"');
 * columns.inserted.map((c) => c.name); // ['id', 'price', 'qty', 'seq'] (not the generated 'total')
 * ```
 */
export async function readSinkColumns(client: pg.Client, regclass: string): Promise<SinkColumns> {
  const result = await client.query<{
    name: string;
    type_oid: number;
    generated: string;
    identity: string;
    sequenced: boolean;
  }>(
    `SELECT a.attname AS name, a.atttypid::int AS type_oid, a.attgenerated::text AS generated,
            a.attidentity::text AS identity,
            coalesce(pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%', false) AS sequenced
       FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
    [regclass],
  );
  const inserted = result.rows.filter((r) => r.generated === '');
  return {
    names: result.rows.map((r) => r.name),
    inserted: inserted.map((r) => ({ name: r.name, typeOid: r.type_oid })),
    updatable: inserted.filter((r) => r.identity !== 'a').map((r) => r.name),
    overridesIdentity: inserted.some((r) => r.identity === 'a'),
    numbering: new Set(inserted.filter((r) => r.identity !== '' || r.sequenced).map((r) => r.name)),
  };
}
