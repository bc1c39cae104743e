import {
  type CacheCatalog,
  type CacheSchema,
  ConfigError,
  type FieldCondition,
  type FieldIssue,
  type FieldType,
  type Filter,
} from '@sluice/core';
import type { Row } from '../ops.js';
import { ownField, setOwnField } from '../own.js';
import { inferCsvFields, inferFields, queryableFields, typeMismatch } from '../schema.js';
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
 * The field types the source declares for its records (a PostgreSQL table's or query's column types), carried
 * through the endpoint's processors; `null` when the source cannot tell (files, JetStream) or a processor computes
 * fields (no `mapFields`): the fields are then typed from a sample.
 */
async function declaredFields(shape: EndpointShape): Promise<Record<string, FieldType> | null> {
  if (shape.isCsv || shape.endpoint.source.type !== 'postgres') return null;
  const { source } = shape.branch(undefined, true);
  let fields: Record<string, FieldType> | undefined;
  try {
    fields = await source.fieldTypes?.();
  } finally {
    await source.close();
  }
  if (!fields) return null;
  checkEndpointFilter(shape, fields);
  for (const p of shape.processors) {
    if (!p.mapFields) return null;
    fields = p.mapFields(fields);
  }
  return fields;
}

/**
 * Refuses an endpoint `filter` that cannot apply to its source's columns — a field the source lacks (often a name
 * `select` gives: the filter runs before it), an operand no value of its column can equal — rather than serve an
 * endpoint that quietly keeps nothing. (Its shape was checked with the configuration.)
 *
 * @throws ConfigError (`CONFIG_INVALID`) with a `filter.…` path per problem.
 */
function checkEndpointFilter(shape: EndpointShape, sourceFields: Record<string, FieldType>): void {
  const { filter } = shape.endpoint;
  if (filter === undefined) return;
  const problems: FieldIssue[] = [];
  filterProblems(filter, sourceFields, 'filter', problems);
  if (problems.length === 0) return;
  throw new ConfigError(
    `Endpoint "${shape.name}": its filter does not fit the source's columns (it applies to them, before select): ${problems
      .map((issue) => `${issue.path}: ${issue.message}`)
      .join('; ')}`,
    problems,
  );
}

/** At most this many of the source's fields are named in an error. */
const FIELDS_NAMED = 20;

/**
 * Refuses a primary key or index field the source's records never have, when the source declares its fields (a
 * PostgreSQL table's columns, through the endpoint's processors) and the configuration leaves the fields to it: a
 * typo there would build an index of nulls (every record's key missing, for the primary key) and serve as if it were
 * fine. (With `fields` configured the configuration's own rules check this; a sampled source may hold a field only
 * in later records, so it is not refused there.)
 *
 * @throws ConfigError (`CONFIG_INVALID`) with a `primaryKey[i]` / `indexes[i][j]` path per unknown field.
 */
function checkKeyFields(shape: EndpointShape, fields: Record<string, FieldType>): void {
  const { primaryKey, indexes } = shape.endpoint;
  const names = Object.keys(fields);
  const known = `${names.slice(0, FIELDS_NAMED).join(', ')}${names.length > FIELDS_NAMED ? ', …' : ''}`;
  const unknown = (field: string, path: string): FieldIssue[] =>
    Object.hasOwn(fields, field)
      ? []
      : [{ path, message: `unknown field "${field}" (the source's records have: ${known})` }];
  const problems = [
    ...primaryKey.flatMap((field, i) => unknown(field, `primaryKey[${i}]`)),
    ...indexes.flatMap((index, i) => index.flatMap((field, j) => unknown(field, `indexes[${i}][${j}]`))),
  ];
  if (problems.length === 0) return;
  throw new ConfigError(
    `Endpoint "${shape.name}": its key or an index names a field its source's records do not have: ${problems
      .map((issue) => `${issue.path}: ${issue.message}`)
      .join('; ')}`,
    problems,
  );
}

/** Operators whose operand is compared with the field's value (`$contains` matches parts: not checked by type). */
const TYPED_OPERATORS = new Set(['$eq', '$ne', '$lt', '$lte', '$gt', '$gte']);

function filterProblems(
  filter: Filter,
  fields: Record<string, FieldType>,
  path: string,
  problems: FieldIssue[],
): void {
  for (const [name, value] of Object.entries(filter)) {
    if (name === '$and' || name === '$or') {
      (value as Filter[]).forEach((inner, i) => {
        filterProblems(inner, fields, `${path}.${name}[${i}]`, problems);
      });
      continue;
    }
    const type = ownField(fields, name);
    if (type === undefined) {
      problems.push({
        path: `${path}.${name}`,
        message: `unknown field "${name}" (the source has no such column)`,
      });
      continue;
    }
    const check = (operand: unknown, at: string) => {
      const mismatch = typeMismatch(operand, type);
      if (mismatch !== null) problems.push({ path: at, message: `${mismatch} (the column is ${type})` });
    };
    if (value === null || typeof value !== 'object') {
      check(value, `${path}.${name}`);
      continue;
    }
    for (const [op, operand] of Object.entries(value as FieldCondition)) {
      if (op === '$in') {
        (operand as unknown[]).forEach((item, i) => {
          check(item, `${path}.${name}.$in[${i}]`);
        });
      } else if (TYPED_OPERATORS.has(op)) check(operand, `${path}.${name}.${op}`);
    }
  }
}

/**
 * Whether a field of type `held` takes every value the source gives a field it declares `declared`: the same type,
 * `json`, `number` for integers, `string` for timestamps (ISO strings).
 */
function holds(held: FieldType, declared: FieldType): boolean {
  return (
    held === declared ||
    held === 'json' ||
    (held === 'number' && declared === 'integer') ||
    (held === 'string' && declared === 'timestamp')
  );
}

/**
 * The cache schema of the next run: the configured fields; else (when `reuse`) the serving generation's, as
 * long as its key and indexes are still the configured ones and its field types hold what the source declares;
 * else the source's declared field types (PostgreSQL column types, through the processors), and for fields the
 * source cannot type, types inferred from a sample of the source.
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
  // Asked even when `fields` are configured: it also checks the endpoint's filter against the source's columns.
  const declared = await declaredFields(shape);
  if (declared && !endpoint.fields) checkKeyFields(shape, declared);
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
      sameJson(info.schema.indexes, base.indexes) &&
      // A generation typed from a sample (e.g. `integer` for a numeric column that held whole values) that would
      // refuse the source's values is not continued: the declared schema differs, so a new generation is built.
      Object.entries(declared ?? {}).every(([name, type]) => {
        const held = ownField(info.schema.fields, name);
        return held === undefined || holds(held, type);
      })
    )
      return isCsv
        ? { schema: info.schema, csvFields: shape.csvFieldsOf(info.schema.fields) }
        : { schema: info.schema };
  }
  let fields: Record<string, FieldType>;
  let csvFields: Record<string, FieldType> | undefined;
  if (declared) fields = { ...declared };
  else {
    const { raw, processed } = await sampleRecords(shape, options.sampleSize);
    if (isCsv) {
      const header = raw.length > 0 ? Object.keys(raw[0]!) : [];
      csvFields = inferCsvFields(
        header,
        raw.map((r) => header.map((h) => String(ownField(r, h) ?? ''))),
      );
      fields = {};
      for (const out of processed.length > 0 ? Object.keys(processed[0]!) : []) {
        setOwnField(fields, out, ownField(csvFields, shape.sourceName(out)) ?? 'string');
      }
    } else fields = inferFields(processed);
  }
  // Columns the query language cannot name stay in the records, outside the schema (configured key and index
  // fields never are such names: the configuration refuses them).
  fields = queryableFields(fields);
  for (const field of [...endpoint.primaryKey, ...endpoint.indexes.flat()])
    if (!Object.hasOwn(fields, field)) setOwnField(fields, field, 'string');
  return { schema: { fields, ...base }, ...(csvFields ? { csvFields } : {}) };
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
