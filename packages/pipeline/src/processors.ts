import { compileFilter, type FieldType, type Filter, FORBIDDEN_KEYS, ValidationError } from '@sluice/core';
import { keyOf, type RecordOp, type Row } from './ops.js';
import type { PipelineProcessor } from './types.js';

/**
 * Keeps the records that match a filter (the query filter language). A record that no longer matches is
 * dropped, or, with `keyFields` (a materialized view), turned into a delete of its key so an update that
 * leaves the filter also leaves the cache.
 *
 * @example
 * ```ts
 * const visible = filterProcessor('items.filter', { category: { $ne: 'hidden' } }, ['id']);
 * ```
 */
export function filterProcessor(
  handle: string,
  filter: Filter,
  keyFields?: readonly string[],
): PipelineProcessor {
  const keep = compileFilter(filter);
  return {
    handle,
    description: { type: 'filter', filter, deletesRejected: keyFields !== undefined },
    mapFields: (fields) => fields,
    process(op) {
      if (op.op === 'delete' || keep(op.record)) return op;
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
      return { ...op, record };
    },
  };
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
