/**
 * Patch upserts: an upsert whose record lacks some fields that keep the value the stored record holds (a
 * PostgreSQL update that left a TOASTed column unchanged sends no value for it). The cache fills them from the
 * stored record inside the commit's write transaction, so the merge reads exactly what that commit replaces.
 */
import { BadRecordError, compileFilter, type Filter, FORBIDDEN_KEYS, type RecordOp } from '@sluice/core';

/**
 * A patch upsert as `RwCache.apply` takes it: core's upsert (`RecordOp`) with the fields it leaves unchanged and,
 * optionally, a filter the merged record must match (else the record is deleted: a filter naming an unchanged field
 * can only be decided on the merged record).
 *
 * @example
 * ```ts
 * cache.apply([{ op: 'upsert', record: { id: 10, qty: 4242 }, unchanged: ['name'] }], { onConflict: 'fail' });
 * ```
 */
export type PatchUpsert = Extract<RecordOp, { op: 'upsert' }>;

/** One patch, validated: what a staged change resolves against the stored record at commit. */
export interface RecordPatch {
  record: Record<string, unknown>;
  unchanged: readonly string[];
  where: Filter | null;
}

/** The patch an op carries, or null for a whole-record op (no `unchanged` fields and no `where`). */
export function patchOf(op: RecordOp, record: Record<string, unknown>, index: number): RecordPatch | null {
  // Untrusted input: checked, not assumed.
  const { unchanged, where } = op as { unchanged?: unknown; where?: unknown };
  if (unchanged === undefined && where === undefined) return null;
  if (op.op !== 'upsert')
    throw new BadRecordError(`Operation ${index}: only an upsert can leave fields unchanged`, {
      offset: index,
    });
  if (
    unchanged !== undefined &&
    (!Array.isArray(unchanged) || unchanged.some((field: unknown) => typeof field !== 'string'))
  )
    throw new BadRecordError(`Operation ${index}: "unchanged" must be a list of field names`, {
      offset: index,
    });
  if (where !== undefined && (typeof where !== 'object' || where === null || Array.isArray(where)))
    throw new BadRecordError(`Operation ${index}: "where" must be a filter`, { offset: index });
  if (where !== undefined)
    try {
      // Compiled now, so a filter that cannot be evaluated fails its apply, never the commit's transaction.
      matcher(where as Filter);
    } catch (err) {
      throw new BadRecordError(`Operation ${index}: "where": ${(err as Error).message}`, { offset: index });
    }
  return {
    record,
    unchanged: (unchanged as string[] | undefined) ?? [],
    where: (where as Filter | undefined) ?? null,
  };
}

const compiled = new WeakMap<
  Filter,
  { timestampFields: ReadonlySet<string>; keep: (record: Record<string, unknown>) => boolean }
>();
const NO_TIMESTAMPS: ReadonlySet<string> = new Set();

/**
 * The record `patch` makes of `stored`: its fields, plus each unchanged field the stored record has. Undefined when
 * there is no stored record (nothing to fill from) or the merged record fails the patch's `where`, which compares
 * the schema's `timestampFields` as instants (the patch's values and the filter's operands come in any spelling).
 */
export function mergePatch(
  stored: Record<string, unknown> | undefined,
  patch: RecordPatch,
  timestampFields: ReadonlySet<string>,
): Record<string, unknown> | undefined {
  if (stored === undefined) return undefined;
  const merged: Record<string, unknown> = { ...patch.record };
  for (const field of patch.unchanged)
    if (!FORBIDDEN_KEYS.has(field) && Object.hasOwn(stored, field)) merged[field] = stored[field];
  if (patch.where !== null && !matcher(patch.where, timestampFields)(merged)) return undefined;
  return merged;
}

/** The compiled filter, once per filter object and timestamp set (one endpoint's ops share theirs). */
function matcher(
  where: Filter,
  timestampFields: ReadonlySet<string> = NO_TIMESTAMPS,
): (record: Record<string, unknown>) => boolean {
  let entry = compiled.get(where);
  if (entry === undefined || entry.timestampFields !== timestampFields) {
    entry = { timestampFields, keep: compileFilter(where, { timestampFields }) };
    compiled.set(where, entry);
  }
  return entry.keep;
}
