/**
 * What a replication source needs of the table beyond its rows: a replica identity that covers the key its records
 * are keyed by, and the table's own identity (its relation OID), which a generation follows — a table dropped and
 * recreated under the same name is another table.
 */
import { ErrorCode, ReplicaIdentityMissingError, SluiceError, type SluiceErrorOptions } from '@sluice/core';
import type pg from 'pg';
import type { Pgoutput } from 'pg-logical-replication';
import { quoteTableName } from '../../pg.js';

/**
 * A table's replica identity: what PostgreSQL writes of the old row for an update or a delete. `columns` are the
 * identity's columns (the primary key's for `default`, the index's for `index`; empty for `full`, which sends the
 * whole old row, and for `nothing`).
 */
export interface ReplicaIdentity {
  kind: 'default' | 'index' | 'full' | 'nothing';
  columns: string[];
  /** The index named by `REPLICA IDENTITY USING INDEX`, or the primary key's index (null for `full`/`nothing`). */
  index: string | null;
  /**
   * For `nothing`: the primary key the table has but PostgreSQL will not use as its identity (a `DEFERRABLE` or an
   * invalid one), so the error says what to change rather than that there is no primary key.
   */
  unusablePrimaryKey?: { index: string; why: string };
}

/**
 * `REPLICA_IDENTITY_MISSING` with the exact gap in its message: the table has an identity, but not one the source
 * can key its records by (core's {@link ReplicaIdentityMissingError} says only that a table has none). `details` name the table, the
 * identity and the key, so tooling does not parse the message.
 */
export class ReplicaIdentityGapError extends SluiceError {
  constructor(
    table: string,
    message: string,
    details: { identity: ReplicaIdentity; key: string[] | null },
    options: SluiceErrorOptions = {},
  ) {
    super({
      code: ErrorCode.REPLICA_IDENTITY_MISSING,
      message,
      ...options,
      details: {
        table,
        identity: details.identity.kind,
        identityColumns: details.identity.columns,
        key: details.key,
      },
    });
  }
}

const KINDS: Record<string, ReplicaIdentity['kind']> = { d: 'default', i: 'index', f: 'full', n: 'nothing' };

/**
 * The replica identity of `table` (`pg_class.relreplident` and the index it names), as PostgreSQL applies it: it
 * takes an index as the identity only when the index is valid and immediate (`RelationGetIndexList`), so a
 * `DEFERRABLE` primary key is no identity at all — once the table is published, its updates and deletes fail.
 */
export async function replicaIdentityOf(client: pg.Client, table: string): Promise<ReplicaIdentity> {
  const result = await client.query<{
    kind: string;
    index: string | null;
    usable: boolean | null;
    deferrable: boolean | null;
    columns: string[] | null;
  }>(
    `SELECT c.relreplident AS kind, ic.relname AS index, i.indisvalid AND i.indimmediate AS usable,
            NOT i.indimmediate AS deferrable,
            (SELECT array_agg(a.attname ORDER BY array_position(i.indkey, a.attnum)) FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey)) AS columns
       FROM pg_class c
       LEFT JOIN pg_index i ON i.indrelid = c.oid
            AND CASE c.relreplident WHEN 'd' THEN i.indisprimary WHEN 'i' THEN i.indisreplident ELSE false END
       LEFT JOIN pg_class ic ON ic.oid = i.indexrelid
      WHERE c.oid = $1::regclass`,
    [quoteTableName(table)],
  );
  const row = result.rows[0];
  const kind = KINDS[row?.kind ?? 'n'] ?? 'nothing';
  // The default identity without a primary key (or an identity index since dropped) is no identity at all:
  // PostgreSQL sends nothing of the old row.
  if ((kind === 'default' || kind === 'index') && !row?.index)
    return { kind: 'nothing', columns: [], index: null };
  // Nor is one on an index PostgreSQL will not use.
  if ((kind === 'default' || kind === 'index') && row?.index && !row.usable)
    return {
      kind: 'nothing',
      columns: [],
      index: null,
      unusablePrimaryKey: { index: row.index, why: row.deferrable ? 'is DEFERRABLE' : 'is not valid' },
    };
  return { kind, columns: row?.columns ?? [], index: row?.index ?? null };
}

const list = (columns: readonly string[]) => `[${columns.map((c) => JSON.stringify(c)).join(', ')}]`;

/**
 * The key the source keys its records by — `key` when given, else the primary key — once the replica identity is
 * known to name it in every update and delete: its columns are all identity columns, or the identity is `FULL`.
 * A key outside the identity would leave deletes without their key and an update that changes the key without the
 * old one (the old record would stay beside the new), so it is refused, saying what to change.
 *
 * @example
 * ```ts
 * keyCoveredByIdentity('items', { kind: 'default', columns: ['id'], index: 'items_pkey' }, null); // ['id']
 * ```
 */
export function keyCoveredByIdentity(
  table: string,
  identity: ReplicaIdentity,
  key: readonly string[] | null,
): string[] {
  const t = JSON.stringify(table);
  const fail = (message: string) =>
    new ReplicaIdentityGapError(table, message, { identity, key: key ? [...key] : null });
  // A primary key PostgreSQL will not use: say which and why, or the user reads that there is none.
  const unusable = identity.unusablePrimaryKey;
  if (identity.kind === 'nothing' && unusable !== undefined)
    throw fail(
      `Table ${t} has no replica identity: its primary key index ${JSON.stringify(unusable.index)} ${unusable.why}, and PostgreSQL uses only a valid, immediate index as one (once published, the table's UPDATEs and DELETEs would fail). Make the primary key NOT DEFERRABLE, or ALTER TABLE ${table} REPLICA IDENTITY USING INDEX on a unique index that is not deferrable, or REPLICA IDENTITY FULL`,
    );
  // No identity at all: core's own error says so (add a primary key, or FULL with a key).
  if (identity.kind === 'nothing') throw new ReplicaIdentityMissingError(table);
  if (key === null || key.length === 0) {
    if (identity.kind === 'default') return identity.columns;
    if (identity.kind === 'index')
      throw fail(
        `Table ${t} has no primary key; its replica identity is the index ${JSON.stringify(identity.index)} on ${list(identity.columns)}: configure the source's "key" as ${list(identity.columns)}`,
      );
    throw fail(
      `Table ${t} has no primary key and REPLICA IDENTITY FULL: configure the source's "key" with the columns that identify a row`,
    );
  }
  if (identity.kind === 'full') return [...key];
  const outside = key.filter((column) => !identity.columns.includes(column));
  if (outside.length === 0) return [...key];
  const what =
    identity.kind === 'default' ? 'primary key' : `replica identity index ${JSON.stringify(identity.index)}`;
  throw fail(
    `The key ${list(key)} of table ${t} is not covered by its replica identity (the ${what} on ${list(identity.columns)}): updates and deletes would not name ${list(outside)}, so the endpoint would keep deleted and replaced records. ALTER TABLE ${table} REPLICA IDENTITY FULL, or key the endpoint on ${list(identity.columns)}`,
  );
}

/**
 * Why the replica identity a pgoutput relation message announces no longer covers `keys`, or null when it does:
 * `ALTER TABLE … REPLICA IDENTITY` under a running stream reaches it as the next relation message, before the
 * changes written with the new identity.
 */
export function streamedIdentityGap(
  table: string,
  relation: Pgoutput.MessageRelation,
  keys: readonly string[],
): string | null {
  // pgoutput flags the identity's columns (flag 1) for the default and index identities.
  const columns = relation.columns.filter((c) => (c.flags & 1) === 1).map((c) => c.name);
  const kind = relation.replicaIdentity;
  const identity: ReplicaIdentity =
    (kind === 'default' || kind === 'index') && columns.length === 0
      ? { kind: 'nothing', columns: [], index: null }
      : { kind, columns, index: kind === 'index' ? '(its identity index)' : null };
  try {
    keyCoveredByIdentity(table, identity, keys);
    return null;
  } catch (err) {
    return (err as Error).message;
  }
}

/** The relation OID of `table` (the table its name resolves to now). */
export async function relationOidOf(client: pg.Client, table: string): Promise<number> {
  const result = await client.query<{ oid: number }>('SELECT $1::regclass::oid::int AS oid', [
    quoteTableName(table),
  ]);
  return result.rows[0]!.oid;
}

/** The table `table` names now: its relation OID and whether `publication` publishes it; null when there is none. */
export interface TableRelation {
  oid: number;
  published: boolean;
}

/** Looks `table` up by name (never throws for a missing table: null). */
export async function tableRelation(
  client: pg.Client,
  table: string,
  publication: string,
): Promise<TableRelation | null> {
  // pg_publication_tables covers every way a publication can name a table (listed, by schema, all tables). It
  // lists a partitioned table's leaves instead of the table unless the publication publishes via the root: either
  // way the table's changes stream (pg_partition_tree of a table that is not partitioned is empty).
  const result = await client.query<{ oid: number; published: boolean }>(
    `SELECT c.oid::int AS oid,
            EXISTS (SELECT 1 FROM pg_publication_tables pt
                      JOIN pg_namespace pn ON pn.nspname = pt.schemaname
                      JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = pt.tablename
                     WHERE pt.pubname = $2
                       AND (pc.oid = c.oid OR pc.oid IN (SELECT relid FROM pg_partition_tree(c.oid)))) AS published
       FROM pg_class c
      WHERE c.oid = to_regclass($1)`,
    [quoteTableName(table), publication],
  );
  return result.rows[0] ?? null;
}

/**
 * Why a generation that follows relation `oid` of `table` cannot go on with what the name resolves to now
 * (`current`), or null when it can. `published` is checked only while streaming: start-up adds the table to the
 * publication itself.
 */
export function relationChange(
  table: string,
  oid: number,
  current: TableRelation | null,
  checkPublished: boolean,
): string | null {
  if (current === null) return `table ${table} (relation ${oid}) was dropped`;
  if (current.oid !== oid)
    return `table ${table} was dropped and recreated (relation ${oid} → ${current.oid}); the generation followed the dropped one`;
  if (checkPublished && !current.published)
    return `table ${table} is no longer in its publication: changes since then were not streamed`;
  return null;
}
