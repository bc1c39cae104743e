import type { FieldType } from '@sluice/core';

/** A record: a flat object of field values. */
export type Row = Record<string, unknown>;

/** Where a record came from, for bad-record reports. */
export interface RecordLocation {
  source: string;
  line?: number;
  offset?: number;
}

/**
 * A typed record operation flowing through the DAG. `insert`, `update` and `upsert` carry the whole record;
 * `delete` carries the primary-key values in key order.
 */
export type RecordOp =
  | { op: 'insert' | 'update' | 'upsert'; record: Row; at?: RecordLocation }
  | { op: 'delete'; key: unknown[]; at?: RecordLocation };

/** The schema records are written with (same shape as `@sluice/cache`'s `CacheSchema`). */
export interface RecordSchema {
  fields: Record<string, FieldType>;
  primaryKey: string[];
  indexes: string[][];
}

/** The primary-key values of a record, in key order (undefined when a key field is missing or null). */
export function keyOf(record: Row, keyFields: readonly string[]): unknown[] | undefined {
  const key: unknown[] = new Array(keyFields.length);
  for (let i = 0; i < keyFields.length; i++) {
    const value = record[keyFields[i]!];
    if (value === undefined || value === null) return undefined;
    key[i] = value;
  }
  return key;
}

/** A stable string form of a key, for dedupe ids and file names. */
export function keyString(key: readonly unknown[]): string {
  return key.length === 1 ? String(key[0]) : JSON.stringify(key);
}
