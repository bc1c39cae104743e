import { compileFilter, type FieldType, type Filter, FORBIDDEN_KEYS, ValidationError } from '@sluice/core';
import { keyOf, type RecordOp, type Row } from './ops.js';
import type { PipelineProcessor } from './types.js';

/**
 * Keeps the records that match a filter (the query filter language). A record that no longer matches is
 * dropped, or, with `keyFields` (a materialized view), turned into a delete of its key so an update that
 * leaves the filter also leaves the cache. `timestampFields`: the fields typed `timestamp`, compared as instants
 * whatever their spelling (PostgreSQL's session zone, a file's offsets), as the cache compares them.
 *
 * @example
 * ```ts
 * const visible = filterProcessor('items.filter', { category: { $ne: 'hidden' } }, ['id']);
 * const recent = filterProcessor('ev.filter', { ts: { $gte: '2026-01-01T00:00:00Z' } }, ['id'], ['ts']);
 * ```
 */
export function filterProcessor(
  handle: string,
  filter: Filter,
  keyFields?: readonly string[],
  timestampFields: readonly string[] = [],
): PipelineProcessor {
  const named = filterFields(filter);
  // Only the fields the filter names matter; they are part of the description, so an endpoint whose filter
  // compared them as text before gets a new generation rather than keep what the text comparison chose.
  const timestamps = [...new Set(timestampFields.filter((field) => named.has(field)))].sort();
  const keep = compileFilter(filter, { timestampFields: new Set(timestamps) });
  return {
    handle,
    description: {
      type: 'filter',
      filter,
      deletesRejected: keyFields !== undefined,
      ...(timestamps.length > 0 ? { timestamps } : {}),
    },
    mapFields: (fields) => fields,
    process(op) {
      if (op.op === 'delete') return op;
      // A partial record (unchanged TOAST values) lacking a field the filter names: decided on the merged record,
      // where the sink fills them in.
      if (op.unchanged?.some((field) => named.has(field)))
        return { ...op, where: op.where === undefined ? filter : { $and: [op.where, filter] } };
      if (keep(op.record)) return op;
      if (keyFields === undefined) return null;
      const key = keyOf(op.record, keyFields);
      return key === undefined ? null : { op: 'delete', key, ...(op.at ? { at: op.at } : {}) };
    },
  };
}

/**
 * Projection and renaming: a list of fields to keep, or `{ newName: "sourceField" }`.
 *
 * @example
 * ```ts
 * selectProcessor('items.select', ['id', 'value']);
 * selectProcessor('items.select', { id: 'item_id', value: 'price' });
 * ```
 */
export function selectProcessor(
  handle: string,
  select: string[] | Record<string, string>,
): PipelineProcessor {
  const pairs: Array<[to: string, from: string]> = Array.isArray(select)
    ? select.map((f) => [f, f])
    : Object.entries(select);
  for (const [to, from] of pairs) {
    if (FORBIDDEN_KEYS.has(to) || FORBIDDEN_KEYS.has(from))
      throw new ValidationError('Invalid projection', [{ path: 'select', message: `reserved field name` }]);
  }
  return {
    handle,
    description: { type: 'select', pairs },
    mapFields(fields) {
      const out: Record<string, FieldType> = {};
      for (const [to, from] of pairs) if (Object.hasOwn(fields, from)) out[to] = fields[from]!;
      return out;
    },
    process(op) {
      if (op.op === 'delete') return op;
      const record: Row = {};
      for (const [to, from] of pairs) {
        if (Object.hasOwn(op.record, from)) record[to] = op.record[from];
      }
      if (op.unchanged === undefined && op.where === undefined) return { ...op, record };
      return { ...op, record, ...renamePatch(op, pairs) };
    },
  };
}

/** The fields a filter names (at any depth of `$and` / `$or`). */
export function filterFields(filter: Filter, into = new Set<string>()): Set<string> {
  for (const [key, value] of Object.entries(filter)) {
    if (key === '$and' || key === '$or') for (const sub of value as Filter[]) filterFields(sub, into);
    else if (!key.startsWith('$')) into.add(key);
  }
  return into;
}

/**
 * A partial upsert's patch fields in the names `select` gives: unchanged fields it keeps (under their new names; the
 * others are simply not needed any more), and its deferred filter renamed — or, when the filter names a field the
 * projection drops, those fields as `lost` (the merged record will not hold them: nobody can decide the filter).
 */
function renamePatch(
  op: Extract<RecordOp, { op: 'upsert' | 'insert' | 'update' }>,
  pairs: ReadonlyArray<[to: string, from: string]>,
): Pick<RecordOp & { op: 'upsert' }, 'unchanged' | 'where' | 'lost'> {
  const out: Pick<RecordOp & { op: 'upsert' }, 'unchanged' | 'where' | 'lost'> = {};
  const unchanged = new Set(op.unchanged ?? []);
  const kept = pairs.filter(([, from]) => unchanged.has(from)).map(([to]) => to);
  out.unchanged = kept;
  if (op.where !== undefined) {
    const renames = new Map<string, string>();
    for (const [to, from] of pairs) if (!renames.has(from)) renames.set(from, to);
    // Every field the filter names must reach the merged record (the record after this projection).
    const lost = [...filterFields(op.where)].filter((field) => !renames.has(field));
    if (lost.length > 0) out.lost = [...(op.lost ?? []), ...lost];
    else out.where = renameFilter(op.where, renames);
  }
  if (op.lost !== undefined && out.lost === undefined) out.lost = op.lost;
  return out;
}

/** A filter with its field names renamed (`renames`: old → new; others kept). */
function renameFilter(filter: Filter, renames: ReadonlyMap<string, string>): Filter {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(filter)) {
    if (key === '$and' || key === '$or')
      out[key] = (value as Filter[]).map((sub) => renameFilter(sub, renames));
    else out[renames.get(key) ?? key] = value;
  }
  return out as Filter;
}

/** A user function over records: return the record (changed or not), `null` to drop it, or several ops. */
export type RecordFunction = (record: Row) => Row | null | RecordOp[];

/**
 * A user-supplied TypeScript function as a processor (library use). `version` goes into the DAG hash:
 * change it when the function's behaviour changes so checkpoints of the old one are not resumed.
 *
 * @example
 * ```ts
 * functionProcessor('orders.enrich', (r) => ({ ...r, total: Number(r.qty) * Number(r.price) }), 'v1');
 * ```
 */
export function functionProcessor(handle: string, fn: RecordFunction, version = '1'): PipelineProcessor {
  return {
    handle,
    description: { type: 'function', version },
    process(op) {
      if (op.op === 'delete') return op;
      const out = fn(op.record);
      if (out === null) return null;
      if (Array.isArray(out)) return out;
      return { ...op, record: out };
    },
  };
}
