import type pg from 'pg';
import { quoteIdent } from '../../pg.js';

/**
 * Which Sluice source created a replication slot. PostgreSQL has no comments on slots, so the mark lives in the
 * comment of the publication Sluice created beside it (`COMMENT ON PUBLICATION … IS 'sluice-owned:{…}'`): a slot
 * is Sluice's only when a publication Sluice created names it. Slots nobody marked — another tool's, or a slot
 * beside a publication the operator made — are never dropped by Sluice.
 */
export interface SlotOwner {
  /** The node id of the app-server whose source created it. */
  node: string;
  /** The source's DAG handle (`<endpoint>.source` for an endpoint). */
  handle: string;
  role: 'endpoint' | 'transfer';
}

/** A publication's ownership mark: its owner and the slot it was created with. */
export interface OwnedSlotMark extends SlotOwner {
  slot: string;
  publication: string;
}

const PREFIX = 'sluice-owned:';

/** The comment text that marks `publication` (and `slot`) as created by `owner`. */
export function ownerComment(owner: SlotOwner, slot: string): string {
  return `${PREFIX}${JSON.stringify({ v: 1, node: owner.node, handle: owner.handle, role: owner.role, slot })}`;
}

/** The mark in a publication comment, or null for any other comment (or none). */
export function parseOwnerComment(publication: string, comment: string | null): OwnedSlotMark | null {
  if (comment === null || !comment.startsWith(PREFIX)) return null;
  try {
    const mark = JSON.parse(comment.slice(PREFIX.length)) as Record<string, unknown>;
    const { node, handle, role, slot } = mark;
    if (typeof node !== 'string' || typeof handle !== 'string' || typeof slot !== 'string') return null;
    return { node, handle, role: role === 'transfer' ? 'transfer' : 'endpoint', slot, publication };
  } catch {
    return null;
  }
}

/** Writes the ownership mark on a publication Sluice created. */
export async function markPublication(
  client: pg.Client,
  publication: string,
  owner: SlotOwner,
  slot: string,
): Promise<void> {
  const text = ownerComment(owner, slot).replace(/'/g, "''");
  await client.query(`COMMENT ON PUBLICATION ${quoteIdent(publication)} IS '${text}'`);
}

/** The comment of a publication (null when it has none or does not exist). */
export async function publicationComment(client: pg.Client, publication: string): Promise<string | null> {
  const result = await client.query<{ comment: string | null }>(
    `SELECT obj_description(oid, 'pg_publication') AS comment FROM pg_publication WHERE pubname = $1`,
    [publication],
  );
  return result.rows[0]?.comment ?? null;
}

/** Every ownership mark in the connected database, by slot name. */
export async function ownedSlotMarks(client: pg.Client): Promise<Map<string, OwnedSlotMark>> {
  const result = await client.query<{ publication: string; comment: string | null }>(
    `SELECT pubname AS publication, obj_description(oid, 'pg_publication') AS comment FROM pg_publication`,
  );
  const marks = new Map<string, OwnedSlotMark>();
  for (const row of result.rows) {
    const mark = parseOwnerComment(row.publication, row.comment);
    if (mark !== null) marks.set(mark.slot, mark);
  }
  return marks;
}
