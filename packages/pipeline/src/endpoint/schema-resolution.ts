import type { CacheCatalog, CacheSchema, FieldType } from '@sluice/core';
import type { Row } from '../ops.js';
import { inferCsvFields, inferFields } from '../schema.js';
import type { EndpointShape } from './shape.js';

/** A cache schema, and the column types a CSV source reads with (CSV sources only). */
export interface ResolvedSchema {
  schema: CacheSchema;
  csvFields?: Record<string, FieldType>;
}

/** Records read to infer field types: as the source gives them, and after the endpoint's processors. */
export interface Sample {
  raw: Row[];
  processed: Row[];
}

/**
 * Reads the first `limit` records of the endpoint's source (without a replication slot, checkpointing nothing)
 * and runs them through its processors.
 *
 * @example
 * ```ts
 * const { raw, processed } = await sampleRecords(shape, 1_000);
 * ```
 */
export async function sampleRecords(shape: EndpointShape, limit: number): Promise<Sample> {
  const branch = shape.branch(undefined, true);
  const controller = new AbortController();
  const raw: Row[] = [];
  const processed: Row[] = [];
  try {
    for await (const item of branch.source.read(null, {
      signal: controller.signal,
      mode: 'transfer',
      batchSize: Math.min(limit, 1_000),
    })) {
      if (item.kind !== 'records') break;
      for (const op of item.ops) {
        if (op.op === 'delete') continue;
        raw.push(op.record);
        let current: Row | null = op.record;
        for (const p of shape.processors) {
          const out = p.process({ op: 'upsert', record: current });
          current = out !== null && !Array.isArray(out) && out.op !== 'delete' ? out.record : null;
          if (current === null) break;
        }
        if (current) processed.push(current);
      }
      if (raw.length >= limit) break;
    }
  } finally {
    controller.abort();
    await branch.source.close();
  }
  return { raw, processed };
}

/** The schema a generation that already exists is written with: configured fields, else its own. */
export function generationSchema(shape: EndpointShape, own: CacheSchema): ResolvedSchema {
  const { endpoint } = shape;
  const schema = endpoint.fields
    ? { fields: endpoint.fields, primaryKey: endpoint.primaryKey, indexes: endpoint.indexes }
    : own;
  return shape.isCsv ? { schema, csvFields: shape.csvFieldsOf(schema.fields) } : { schema };
}

/**
 * The cache schema of the next run: the configured fields; else (when `reuse`) the serving generation's, as
 * long as its key and indexes are still the configured ones; else fields inferred from a sample of the source.
 *
 * @example
 * ```ts
 * const { schema, csvFields } = await resolveSchema(shape, caches, { reuse: true, sampleSize: 1_000 });
 * ```
 */
export async function resolveSchema(
  shape: EndpointShape,
  caches: Pick<CacheCatalog, 'resolveAlias' | 'info'>,
  options: { reuse: boolean; sampleSize: number },
): Promise<ResolvedSchema> {
  const { endpoint, isCsv } = shape;
  const base = { primaryKey: endpoint.primaryKey, indexes: endpoint.indexes };
  if (endpoint.fields) {
    const schema = { fields: endpoint.fields, ...base };
    return isCsv ? { schema, csvFields: shape.csvFieldsOf(endpoint.fields) } : { schema };
  }
  const target = caches.resolveAlias(shape.name);
  if (options.reuse && target) {
    const info = await caches.info(target.cache);
    if (
      info &&
      sameJson(info.schema.primaryKey, base.primaryKey) &&
      sameJson(info.schema.indexes, base.indexes)
    )
      return isCsv
        ? { schema: info.schema, csvFields: shape.csvFieldsOf(info.schema.fields) }
        : { schema: info.schema };
  }
  const { raw, processed } = await sampleRecords(shape, options.sampleSize);
  let fields: Record<string, FieldType>;
  let csvFields: Record<string, FieldType> | undefined;
  if (isCsv) {
    const header = raw.length > 0 ? Object.keys(raw[0]!) : [];
    csvFields = inferCsvFields(
      header,
      raw.map((r) => header.map((h) => String(r[h] ?? ''))),
    );
    fields = {};
    for (const out of processed.length > 0 ? Object.keys(processed[0]!) : []) {
      fields[out] = csvFields[shape.sourceName(out)] ?? 'string';
    }
  } else fields = inferFields(processed);
  for (const field of [...endpoint.primaryKey, ...endpoint.indexes.flat()]) fields[field] ??= 'string';
  return { schema: { fields, ...base }, ...(csvFields ? { csvFields } : {}) };
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
