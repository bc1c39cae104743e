/**
 * Which publication, and which membership of the table in it, a generation streams through. The slot delivers a
 * table's changes only while its publication carries the table (pgoutput reads the publication as it was when each
 * change was written): a publication dropped and made again, or the table taken out of it and put back — while the
 * endpoint was stopped, or by the start-up that repairs the publication — leaves changes the slot never delivers.
 * The OIDs tell: a new publication, or a new `pg_publication_rel` row, is a gap the generation cannot resume across.
 */
import type pg from 'pg';
import { quoteTableName } from '../../pg.js';

/**
 * `<publication OID>:<membership>` of `table` in `publication` now: the OID of its `pg_publication_rel` row, or
 * `implicit` when the publication carries it another way (all tables, its schema, its partitions); null when the
 * publication does not exist.
 */
export async function publicationMembership(
  client: pg.Client,
  publication: string,
  table: string,
): Promise<string | null> {
  const result = await client.query<{ pub: string; rel: string | null }>(
    `SELECT p.oid::text AS pub,
            (SELECT pr.oid::text FROM pg_publication_rel pr
              WHERE pr.prpubid = p.oid AND pr.prrelid = to_regclass($2)) AS rel
       FROM pg_publication p WHERE p.pubname = $1`,
    [publication, quoteTableName(table)],
  );
  const row = result.rows[0];
  if (row === undefined) return null;
  return `${row.pub}:${row.rel ?? 'implicit'}`;
}

/**
 * Why a generation that streamed through publication membership `known` cannot resume with `now`, or null.
 * Unknown (`known` undefined: a checkpoint written before memberships were recorded) → not checked.
 */
export function membershipChange(
  publication: string,
  table: string,
  known: string | undefined,
  now: string | null,
): string | null {
  if (known === undefined || known === now) return null;
  const [knownPub] = known.split(':');
  if (now === null || now.split(':')[0] !== knownPub)
    return `publication ${publication} was dropped (or made again) since the generation last streamed: the slot cannot deliver the changes made meanwhile`;
  return `table ${table} was taken out of publication ${publication} (and put back) since the generation last streamed: the slot cannot deliver the changes made meanwhile`;
}
