/**
 * Records are stored as the JSON text they are served as (UTF-8), so a lookup or a page copies bytes from LMDB
 * into the response without decoding and re-serializing them. The text has a canonical field order: the
 * schema's declared fields in declaration order, then any extra fields in the record's own order. A field whose
 * value is `undefined` is omitted (as `JSON.stringify` does).
 */
import type { CacheSchema } from '@sluice/core';

/**
 * Version of the stored record form; caches stored in another form are refused (rebuild them).
 * 1: MessagePack records, index entries hold the data key. 2: JSON text, index entries hold the data key.
 * 3: JSON text, index entries hold the record's JSON text too (covering: an index-answered page reads no data
 * entry). 4: as 3, with `timestamp` values in canonical UTC form (`YYYY-MM-DDTHH:MM:SS.ffffffZ`, core's
 * `canonicalTimestamp`), so their text order is time order.
 */
export const RECORD_FORMAT = 4;
/** What `RECORD_FORMAT` means, for error messages. */
export const RECORD_FORMAT_NAME =
  'JSON text, canonical field order, covering index entries, timestamps in UTC with microseconds';

/** Serializes checked records of one schema to their stored (and served) JSON text. */
export type RecordSerializer = (record: Record<string, unknown>) => string;

const serializers = new WeakMap<CacheSchema, RecordSerializer>();

/**
 * The serializer of `schema`'s records (built once per schema): declared fields first, in declaration order.
 *
 * @example
 * ```ts
 * recordSerializer({ fields: { id: 'integer', v: 'number' }, primaryKey: ['id'], indexes: [] })({ v: 2, id: 1 });
 * // '{"id":1,"v":2}'
 * ```
 */
export function recordSerializer(schema: CacheSchema): RecordSerializer {
  let serialize = serializers.get(schema);
  if (serialize) return serialize;
  const fields = Object.keys(schema.fields);
  const names = fields.map((field) => `${JSON.stringify(field)}:`);
  const declared = new Set(fields);
  serialize = (record) => {
    let out = '{';
    let own = 0;
    for (let i = 0; i < fields.length; i++) {
      const field = fields[i]!;
      if (!Object.hasOwn(record, field)) continue;
      own += 1;
      const text = JSON.stringify(record[field]);
      if (text === undefined) continue;
      out += out.length === 1 ? names[i] + text : `,${names[i]}${text}`;
    }
    // Extra (undeclared) fields are kept, after the declared ones.
    const keys = Object.keys(record);
    if (keys.length !== own)
      for (const key of keys) {
        if (declared.has(key)) continue;
        const text = JSON.stringify(record[key]);
        if (text === undefined) continue;
        out += `${out.length === 1 ? '' : ','}${JSON.stringify(key)}:${text}`;
      }
    return `${out}}`;
  };
  serializers.set(schema, serialize);
  return serialize;
}

/** The record a stored JSON text holds. */
export function decodeRecord(bytes: Uint8Array): Record<string, unknown> {
  return JSON.parse(Buffer.isBuffer(bytes) ? bytes.toString('utf8') : Buffer.from(bytes).toString('utf8'));
}
