/**
 * A partitioned table as a replication source. Its rows live in its leaf partitions, and a publication that does not
 * publish via the partition root (PostgreSQL's default) streams each change, and each truncate, under the leaf it
 * touched: the mirror must take those as the table's. A generation follows the set of leaves it was snapshotted
 * with, because attaching or detaching a partition adds or removes rows without a change to stream.
 */
import { SourceSchemaChangedError } from '@sluice/core';
import type pg from 'pg';
import type { Pgoutput } from 'pg-logical-replication';
import { quoteTableName } from '../../pg.js';

/**
 * The relation OIDs of the leaf partitions of `table`, ascending; null for a table that is not partitioned (a
 * table cannot become partitioned without being recreated, which the relation OID already tells).
 *
 * @example
 * ```ts
 * await leafPartitionsOf(client, 'events'); // [16390, 16395] (events_eu, events_us)
 * await leafPartitionsOf(client, 'items'); // null
 * ```
 */
export async function leafPartitionsOf(client: pg.Client, table: string): Promise<number[] | null> {
  const result = await client.query<{ partitioned: boolean; leaves: number[] }>(
    `SELECT c.relkind = 'p' AS partitioned,
            ARRAY(SELECT t.relid::oid::int FROM pg_partition_tree(c.oid) t
                   WHERE t.isleaf AND t.relid <> c.oid ORDER BY 1) AS leaves
       FROM pg_class c WHERE c.oid = $1::regclass`,
    [quoteTableName(table)],
  );
  const row = result.rows[0];
  return row?.partitioned ? row.leaves : null;
}

/**
 * Why a generation snapshotted with the leaves `known` cannot go on with the leaves there are `now`, or null: a
 * partition attached brings its rows and one detached takes its rows away, neither as a change that streams. A new
 * empty partition costs a rebuild that was not needed, never a row.
 */
export function partitionsChange(
  table: string,
  known: readonly number[],
  now: readonly number[],
): string | null {
  const before = new Set(known);
  const after = new Set(now);
  const attached = now.filter((oid) => !before.has(oid));
  const detached = known.filter((oid) => !after.has(oid));
  if (attached.length === 0 && detached.length === 0) return null;
  const parts = [
    ...(attached.length > 0 ? [`partition(s) ${attached.join(', ')} attached`] : []),
    ...(detached.length > 0 ? [`partition(s) ${detached.join(', ')} detached or dropped`] : []),
  ];
  return `table ${table}: ${parts.join(', ')} (rows came or went without changes to stream)`;
}

/** What a streamed truncate does to the mirrored table: nothing, or empties it. */
export const TruncateScope = { none: 'none', all: 'all' } as const;
export type TruncateScope = (typeof TruncateScope)[keyof typeof TruncateScope];

/**
 * What a truncate naming `relations` does to the mirrored table: `all` when it names the table itself (a
 * publication via the root) or every leaf partition (`TRUNCATE` of a partitioned table reaches pgoutput as its
 * leaves), `none` when it names none of them. A truncate of only some leaves removed rows the cache cannot tell
 * apart (a record does not say which partition held it): `SOURCE_SCHEMA_CHANGED`, and the new generation's snapshot
 * holds exactly the rows that are left.
 */
export function truncateScope(
  table: string,
  relations: ReadonlyArray<Pgoutput.MessageRelation | undefined>,
  isTable: (relation: Pgoutput.MessageRelation) => boolean,
  partitions: ReadonlySet<number>,
): TruncateScope {
  const named = relations.filter((r): r is Pgoutput.MessageRelation => r !== undefined);
  if (named.some(isTable)) return TruncateScope.all;
  const leaves = named.filter((r) => partitions.has(r.relationOid));
  if (leaves.length === 0) return TruncateScope.none;
  if (new Set(leaves.map((r) => r.relationOid)).size === partitions.size) return TruncateScope.all;
  const names = leaves.map((r) => `${r.schema}.${r.name}`).join(', ');
  throw new SourceSchemaChangedError(
    `Table ${table}: partition(s) ${names} truncated alone (the cache cannot tell which records they held); the endpoint needs a new generation`,
    { details: { table, change: `partition(s) ${names} truncated` } },
  );
}
