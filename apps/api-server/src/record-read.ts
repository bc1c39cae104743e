/**
 * Reading one record by its key segment: the stored bytes and the commit state of the snapshot they were read
 * in, with the token's row filter applied. One definition for the fastify lookup route and the lookups answered
 * below fastify (fast-lookup.ts), so both answer the same.
 */
import { checkRowFilter } from '@sluice/cache';
import {
  type CacheSchema,
  type CommitState,
  compileFilter,
  type Filter,
  type QueryLimits,
  type ReadableCache,
} from '@sluice/core';
import { parseKeySegment } from './keys.js';
import type { Lease } from './serving-table.js';

/** What a lookup read: `bytes` is undefined when the record does not exist for this reader. */
export interface RecordRead {
  /** The commit state of the snapshot the record was read in (read first, so the data ⊇ this checkpoint). */
  readonly state: Readonly<CommitState>;
  /** The record's stored JSON text, or undefined: no such key, or outside the token's row filter. */
  readonly bytes: Uint8Array | undefined;
}

/** Reads the record named by a raw (undecoded) key segment; throws VALIDATION_FAILED for a malformed key. */
export type RecordReader = (lease: Lease, rawKey: string, rowFilter: Filter | undefined) => RecordRead;

/** A cache's bytes are a `Uint8Array` to core's port (it names no Node type): decoded here for a row filter. */
const utf8 = new TextDecoder();

/**
 * The record reader of one application (it keeps the compiled row-filter predicates of the tokens it has seen).
 * `limits` are the ones the token's claims were read with (a row filter is checked against them, as queries check
 * it).
 *
 * @example
 * ```ts
 * const readRecord = recordReader(limits);
 * const { state, bytes } = readRecord(lease, '42', rowFilter);
 * ```
 */
export function recordReader(limits: QueryLimits): RecordReader {
  // Per row filter (a cached token's scope hands out the same object) and generation schema (a generation's schema
  // gains fields: a filter naming one fits from then on).
  const predicates = new WeakMap<
    Filter,
    WeakMap<CacheSchema, (record: Record<string, unknown>) => boolean>
  >();
  const predicateOf = (filter: Filter, schema: CacheSchema) => {
    let bySchema = predicates.get(filter);
    if (bySchema === undefined) {
      bySchema = new WeakMap();
      predicates.set(filter, bySchema);
    }
    let predicate = bySchema.get(schema);
    if (!predicate) {
      // The filter as the cache's queries read it (`checkRowFilter`: timestamp operands as canonical UTC text, the
      // form records are stored in), not as the token spells it: compiled as spelled, `{"at": {"$lt":
      // "2026-01-01T00:00:00+05:00"}}` compared text with text and let through records of a later instant that
      // every query of the same token hides.
      predicate = compileFilter(checkRowFilter(filter, schema, limits));
      bySchema.set(schema, predicate);
    }
    return predicate;
  };
  // A generation's primary key and the types of its key fields never change (the fields it gains later — columns
  // added to its source — are never key fields): read once per generation, not per lookup (`schema` looks at the
  // stored schema entry each time it is read).
  const keySchemas = new WeakMap<ReadableCache, CacheSchema>();
  const keySchemaOf = (cache: ReadableCache) => {
    let schema = keySchemas.get(cache);
    if (schema === undefined) {
      schema = cache.schema;
      keySchemas.set(cache, schema);
    }
    return schema;
  };
  return (lease, rawKey, rowFilter) => {
    const key = parseKeySegment(rawKey, keySchemaOf(lease.cache));
    // The state and the record come from one read snapshot (servingState starts it, getJson reads in it).
    const state = lease.cache.servingState();
    const bytes = lease.cache.getJson(key);
    // A record outside the token's row filter does not exist for that token (the only case it is decoded).
    if (
      bytes !== undefined &&
      rowFilter &&
      !predicateOf(rowFilter, lease.cache.schema)(JSON.parse(utf8.decode(bytes)))
    )
      return { state, bytes: undefined };
    return { state, bytes };
  };
}
