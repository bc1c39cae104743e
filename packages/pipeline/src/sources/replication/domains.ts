import type { FieldType } from '@sluice/core';
import type pg from 'pg';
import { setOwnField } from '../../own.js';
import { fieldTypeOfPg } from '../../pg.js';
import type { ColumnList } from './setup.js';

/**
 * Every domain type of the database, by OID, mapped to the OID of the type it is finally built on (a domain over a
 * domain resolves to the innermost base type).
 *
 * Why: pgoutput names a domain column by the domain's OID, where a query's result names its base type (PostgreSQL
 * sends the base type in a row description), and the pipeline's parsers know only built-in types — so without
 * this a streamed `posint` (a domain over `int4`) would be the text `"5"` where the snapshot read the number 5,
 * and an endpoint typed `integer` would refuse every streamed row. Read when a stream starts: a domain created
 * after that is read as its text until the stream restarts.
 *
 * @example
 * ```ts
 * const baseTypes = await connections.withClient(domainBaseTypes); // Map { 16391 => 23 }
 * textParser(baseTypes.get(column.typeOid) ?? column.typeOid);
 * ```
 */
export async function domainBaseTypes(client: pg.Client): Promise<Map<number, number>> {
  const result = await client.query<{ domain: number; base: number }>(
    `WITH RECURSIVE chain(domain, base) AS (
       SELECT oid, typbasetype FROM pg_type WHERE typtype = 'd'
       UNION ALL
       SELECT chain.domain, t.typbasetype FROM chain JOIN pg_type t ON t.oid = chain.base WHERE t.typtype = 'd'
     )
     SELECT chain.domain, chain.base FROM chain JOIN pg_type t ON t.oid = chain.base WHERE t.typtype <> 'd'`,
  );
  return new Map(result.rows.map((r) => [r.domain, r.base]));
}

/**
 * The field types of the records read from `columns` (a position's columns, named by their type OIDs as the catalog
 * and relation messages give them): a domain column is typed by its base type, as its values are parsed and as a
 * query's result (what a fresh generation's schema is typed from) names it.
 *
 * @example
 * ```ts
 * columnFieldTypes([['id', 23, 1], ['n', 16391, 2]], new Map([[16391, 23]])); // { id: 'integer', n: 'integer' }
 * ```
 */
export function columnFieldTypes(
  columns: ColumnList,
  baseTypes: ReadonlyMap<number, number>,
): Record<string, FieldType> {
  const fields: Record<string, FieldType> = {};
  for (const [name, oid] of columns) setOwnField(fields, name, fieldTypeOfPg(baseTypes.get(oid) ?? oid));
  return fields;
}
