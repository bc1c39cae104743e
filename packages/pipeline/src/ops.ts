import type { RecordOp as CacheRecordOp, Filter } from '@sluice/core';
import { ownField } from './own.js';

/** A record: a flat object of field values. */
export type Row = Record<string, unknown>;

/**
 * Where a record came from: for bad-record reports, and as the op's *source position* — the one place in the
 * source this op was read from, the same on every replay and different for every later change (a file's byte
 * offset, a stream sequence, a PostgreSQL keyset or cursor position). Sinks that dedupe (JetStream) name ops by it.
 */
export interface RecordLocation {
  source: string;
  line?: number;
  /** Byte offset (files) or stream sequence (JetStream). */
  offset?: number;
  /** A position with no single number (PostgreSQL: the snapshot's keyset or the cursor value and key). */
  position?: string;
}

/**
 * The op's source position as a string, or undefined when the source gives none.
 *
 * @example
 * ```ts
 * sourcePosition({ source: 't1.source', offset: 120 }); // 't1.source@120'
 * ```
 */
export function sourcePosition(at: RecordLocation | undefined): string | undefined {
  if (at === undefined) return undefined;
  const where = at.position ?? at.offset ?? at.line;
  return where === undefined ? undefined : `${at.source}@${where}`;
}

/**
 * A typed record operation flowing through the DAG: core's {@link CacheRecordOp} (`insert`, `update` and `upsert`
 * carry the whole record; `delete` the primary-key values in key order) plus where it was read.
 */
export type RecordOp = CacheRecordOp & { at?: RecordLocation } & RecordPatchFields;

/**
 * What an upsert whose record is partial carries (a PostgreSQL update that left TOASTed columns unchanged: pgoutput
 * sends no value for them). Only a sink that `acceptsPatches` (the cache sink, which fills them from the stored
 * record in its commit's write transaction) gets such an op; for any other it is a bad record.
 */
export interface RecordPatchFields {
  /** Fields absent from `record` that keep their previous value (the names of the op's own stage). */
  unchanged?: string[];
  /** A filter that names an unchanged field: decided on the merged record (failing it deletes the key). */
  where?: Filter;
  /** Fields `where` names that a `select` dropped: the filter cannot be decided (a bad record). */
  lost?: string[];
  /**
   * The primary-key values of the record the unchanged fields come from, when not the op's own: an update that
   * changed the key (the op then precedes the delete of that key).
   */
  from?: unknown[];
  /**
   * The source transaction that made the change, as the source names it (PostgreSQL: its xid): a source that reads
   * the unchanged values itself (`PipelineSource.complete`) reads them once that transaction is visible.
   */
  transaction?: string;
}

/** Whether an op is a partial upsert (it carries unchanged fields or a deferred filter). */
export function isPatch(op: RecordOp): boolean {
  return (
    op.op !== 'delete' &&
    ((op.unchanged !== undefined && op.unchanged.length > 0) ||
      op.where !== undefined ||
      op.lost !== undefined)
  );
}

/** The primary-key values of a record, in key order (undefined when a key field is missing or null). */
export function keyOf(record: Row, keyFields: readonly string[]): unknown[] | undefined {
  const key: unknown[] = new Array(keyFields.length);
  for (let i = 0; i < keyFields.length; i++) {
    const value = ownField(record, keyFields[i]!);
    if (value === undefined || value === null) return undefined;
    key[i] = value;
  }
  return key;
}

/** A stable string form of a key, for dedupe ids and file names. */
export function keyString(key: readonly unknown[]): string {
  return key.length === 1 ? String(key[0]) : JSON.stringify(key);
}
