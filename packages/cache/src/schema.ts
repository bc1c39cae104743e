import {
  BadRecordError,
  type CacheSchema,
  canonicalTimestamp,
  checkKeyAndIndexes,
  type FieldIssue,
  type FieldType,
  FieldTypeSchema,
  FORBIDDEN_KEYS,
  hashJson,
  isTimestamp,
  parseOrThrow,
  ValidationError,
} from '@sluice/core';
import { z } from 'zod';

const FieldNameSchema = z
  .string()
  .min(1)
  .max(256)
  .refine((f) => !f.startsWith('$') && !FORBIDDEN_KEYS.has(f), { message: 'not a valid field name' });

const FieldListSchema = z.array(FieldNameSchema).min(1).max(8);

/** Fields a writer adds to a generation's schema (`RwCache.addFields`). */
const AddedFieldsSchema = z.record(FieldNameSchema, FieldTypeSchema);

/**
 * The zod schema of a {@link CacheSchema}: every key and index field must be a declared field, of a key type in
 * the key, listed once; no index twice (core's `checkKeyAndIndexes`, the rules `sluice.yaml` is checked by too).
 */
export const CacheSchemaSchema = z
  .strictObject({
    fields: z
      .record(FieldNameSchema, FieldTypeSchema)
      .refine((fields) => Object.keys(fields).length <= 512, { message: 'at most 512 fields' }),
    primaryKey: FieldListSchema,
    indexes: z.array(FieldListSchema).max(32),
  })
  .superRefine(checkKeyAndIndexes);

/**
 * Validates an untrusted schema, throwing `VALIDATION_FAILED` with the failing paths.
 *
 * @example
 * ```ts
 * const schema = parseCacheSchema({ fields: { id: 'integer', v: 'number' }, primaryKey: ['id'], indexes: [['v']] });
 * ```
 */
export function parseCacheSchema(input: unknown): CacheSchema {
  const parsed = parseOrThrow(CacheSchemaSchema, input, 'Invalid cache schema');
  return { fields: { ...parsed.fields }, primaryKey: [...parsed.primaryKey], indexes: parsed.indexes };
}

/**
 * A generation's queryable schema: `schema` (its identity, as created) with the fields its writer added since
 * declared after its own, in the order they came; `schema` itself when none were.
 *
 * @example
 * ```ts
 * withAddedFields({ fields: { id: 'integer' }, primaryKey: ['id'], indexes: [] }, { note: 'string' });
 * // { fields: { id: 'integer', note: 'string' }, primaryKey: ['id'], indexes: [] }
 * ```
 */
export function withAddedFields(
  schema: CacheSchema,
  added: Readonly<Record<string, FieldType>> | undefined,
): CacheSchema {
  if (added === undefined || Object.keys(added).length === 0) return schema;
  return { ...schema, fields: { ...schema.fields, ...added } };
}

/**
 * The fields of `added` that `schema` lacks, checked as a schema's fields are (names, types, at most 512 fields in
 * all); a name `schema` has with another type is refused too. Throws `VALIDATION_FAILED` with the failing paths.
 */
export function newFields(schema: CacheSchema, added: unknown): Record<string, FieldType> {
  const fields = parseOrThrow(AddedFieldsSchema, added, 'Invalid fields to add');
  const out: Record<string, FieldType> = {};
  const issues: FieldIssue[] = [];
  for (const [name, type] of Object.entries(fields)) {
    const held = Object.hasOwn(schema.fields, name) ? schema.fields[name] : undefined;
    if (held === undefined) out[name] = type;
    else if (held !== type)
      issues.push({ path: `fields.${name}`, message: `already a field of type ${held}, not ${type}` });
  }
  if (Object.keys(schema.fields).length + Object.keys(out).length > 512)
    issues.push({ path: 'fields', message: 'at most 512 fields' });
  if (issues.length > 0)
    throw new ValidationError(`Invalid fields to add: ${issues[0]!.path}: ${issues[0]!.message}`, issues);
  return out;
}

/** A stable identifier of an index: its fields joined by ",". */
export function indexId(fields: readonly string[]): string {
  return fields.join(',');
}

/**
 * A short, stable hash of a schema: equal for equal fields, primary key and index set (index order does not
 * matter; field order inside an index and the key does).
 *
 * @example
 * ```ts
 * schemaHash({ fields: { id: 'integer' }, primaryKey: ['id'], indexes: [] }); // '3f1c…' (16 hex chars)
 * ```
 */
export function schemaHash(schema: CacheSchema): string {
  const indexes = schema.indexes.map((index) => indexId(index)).sort();
  return hashJson({ fields: schema.fields, primaryKey: schema.primaryKey, indexes }).slice(0, 16);
}

/**
 * Whether a (non-null) value is one a field of `type` holds: the check every stored record passed. A `timestamp`
 * is ISO 8601 text or epoch milliseconds (core's `canonicalTimestamp`); it is stored in canonical form.
 */
export function typeMatches(type: FieldType, value: unknown): boolean {
  switch (type) {
    case 'string':
      return typeof value === 'string';
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'timestamp':
      return isTimestamp(value);
    case 'json':
      return true;
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
  return typeof value;
}

const fieldLists = new WeakMap<CacheSchema, Array<[string, FieldType]>>();

function fieldList(schema: CacheSchema): Array<[string, FieldType]> {
  let fields = fieldLists.get(schema);
  if (!fields) {
    fields = Object.entries(schema.fields);
    fieldLists.set(schema, fields);
  }
  return fields;
}

const timestampLists = new WeakMap<CacheSchema, readonly string[]>();
const timestampSets = new WeakMap<CacheSchema, ReadonlySet<string>>();

/** {@link timestampFields} as a set, the same object for the same schema (filters compiled for it are reused). */
export function timestampFieldSet(schema: CacheSchema): ReadonlySet<string> {
  let set = timestampSets.get(schema);
  if (!set) {
    set = new Set(timestampFields(schema));
    timestampSets.set(schema, set);
  }
  return set;
}

/** The schema's `timestamp` fields (most schemas have none: then nothing is canonicalized). */
export function timestampFields(schema: CacheSchema): readonly string[] {
  let fields = timestampLists.get(schema);
  if (!fields) {
    fields = fieldList(schema)
      .filter(([, type]) => type === 'timestamp')
      .map(([field]) => field);
    timestampLists.set(schema, fields);
  }
  return fields;
}

/**
 * Checks a record against the schema: an object, every declared field either absent/null or of its type,
 * every primary-key field present and non-null. Extra fields are kept as they are. Returns the record to store:
 * `record` itself, or a shallow copy whose `timestamp` values are in canonical form (core's `canonicalTimestamp`:
 * stored, indexed and compared as UTC text with microseconds, so text order is time order) when any was not.
 * Throws `BAD_RECORD` naming the field.
 */
export function checkRecord(schema: CacheSchema, record: unknown): Record<string, unknown> {
  if (typeof record !== 'object' || record === null || Array.isArray(record))
    throw new BadRecordError(`A record must be an object, got ${describe(record)}`, {});
  let object = record as Record<string, unknown>;
  for (const [field, type] of fieldList(schema)) {
    const value = Object.hasOwn(object, field) ? object[field] : undefined;
    if (value === undefined || value === null) continue;
    if (type === 'timestamp') {
      const canonical = canonicalTimestamp(value);
      if (canonical === null)
        throw new BadRecordError(
          `Field "${field}" must be timestamp (ISO 8601 text, years 0001–9999, or epoch milliseconds), got ${describe(value)}${typeof value === 'string' ? ` "${value.slice(0, 40)}"` : ''}`,
          {},
        );
      if (canonical !== value) {
        // Copied once, never written into the caller's object.
        if (object === record) object = { ...object };
        object[field] = canonical;
      }
    } else if (!typeMatches(type, value))
      throw new BadRecordError(`Field "${field}" must be ${type}, got ${describe(value)}`, {});
  }
  for (const field of schema.primaryKey) {
    const value = Object.hasOwn(object, field) ? object[field] : undefined;
    if (value === undefined || value === null)
      throw new BadRecordError(`Primary key field "${field}" is missing`, {});
  }
  return object;
}

/** The primary-key values of a checked record, in primary-key order. */
export function keyOf(schema: CacheSchema, record: Record<string, unknown>): unknown[] {
  return schema.primaryKey.map((field) => record[field]);
}

/**
 * Primary-key values given by a caller (`get`, `delete`; checked by {@link keyProblem}) as they are stored:
 * `key` itself, or a copy whose `timestamp` components are canonical, so any spelling of an instant finds it.
 */
export function storedKey(schema: CacheSchema, key: readonly unknown[]): unknown[] {
  if (timestampFields(schema).length === 0) return key as unknown[];
  let out: unknown[] | null = null;
  for (let i = 0; i < key.length; i++) {
    if (schema.fields[schema.primaryKey[i]!] !== 'timestamp') continue;
    const canonical = canonicalTimestamp(key[i]);
    if (canonical === null || canonical === key[i]) continue;
    out ??= [...key];
    out[i] = canonical;
  }
  return out ?? (key as unknown[]);
}

/** What is wrong with primary-key values given by a caller (`get`, `delete`), or null: count and types. */
export function keyProblem(schema: CacheSchema, key: unknown): string | null {
  if (!Array.isArray(key) || key.length !== schema.primaryKey.length)
    return `a key is an array of ${schema.primaryKey.length} value(s): ${schema.primaryKey.join(', ')}`;
  for (let i = 0; i < key.length; i++) {
    const field = schema.primaryKey[i]!;
    const type = schema.fields[field]!;
    const value: unknown = key[i];
    if (value === null || value === undefined || !typeMatches(type, value))
      return `key field "${field}" must be ${type}, got ${describe(value)}`;
  }
  return null;
}
