import { createHash } from 'node:crypto';
import type { CacheSchema, CommitState, FieldType } from '@sluice/core';
import type { Database, DatabaseOptions } from 'lmdb';
import { encodeKey, stringBudget } from './key-codec.js';
import type { SharedEnv } from './lmdb-env.js';
import { ARENA_SCAN_OPTIONS } from './page-arena.js';
import { indexId } from './schema.js';

/**
 * One secondary index: its fields, its database, and the string budget of its keys. Its entries map
 * (index values, primary key) to the record's stored JSON text, the same bytes as the data entry (covering;
 * record format 3): a page the index answers is read from the index alone.
 */
export interface IndexDb {
  readonly id: string;
  readonly fields: readonly string[];
  readonly db: Database<Buffer, Buffer>;
  /**
   * A read handle on the same database whose values are copied into the active arena (see `page-arena.ts`):
   * each value reads as its offset in the arena's buffer.
   */
  readonly scan: Database<number, Buffer>;
  /** Per-string-component budget so that index values + primary key fit LMDB's key limit. */
  readonly budget: number;
}

// Records are stored as their served JSON text (see record-json.ts): bytes in, bytes out.
const DATA_OPTIONS: DatabaseOptions = { keyEncoding: 'binary', encoding: 'binary' };
const INDEX_OPTIONS: DatabaseOptions = { keyEncoding: 'binary', encoding: 'binary' };

/** The databases of one cache environment, typed (resolved through the environment on each use). */
export class CacheDbs {
  readonly env: SharedEnv;
  readonly indexes: readonly IndexDb[];
  /** Per-string-component budget of data keys. */
  readonly keyBudget: number;
  /**
   * True when index entries hold the record's JSON text (record format 3); false for a format-2 generation
   * (read-only: its entries hold the data key, so each is looked up in `data`).
   */
  readonly covering: boolean;

  constructor(env: SharedEnv, schema: CacheSchema, options: { covering?: boolean } = {}) {
    this.env = env;
    this.covering = options.covering ?? true;
    const components = schema.primaryKey.length;
    this.keyBudget = stringBudget(components);
    this.indexes = schema.indexes.map((fields) => {
      const name = indexDbName(fields);
      return {
        id: indexId(fields),
        fields,
        get db() {
          return env.db<Buffer, Buffer>(name, INDEX_OPTIONS);
        },
        get scan() {
          return env.db<number, Buffer>(name, ARENA_SCAN_OPTIONS, `${name}#scan`);
        },
        budget: stringBudget(fields.length + components),
      };
    });
    // Open (and, in a writable environment, create) every database now.
    void this.data;
    void this.meta;
    // Scan handles too: opened lazily inside a read snapshot (the api-server's first query), the first range
    // read through one failed with "No transaction to renew".
    for (const index of this.indexes) {
      void index.db;
      void index.scan;
    }
  }

  /** Records by encoded primary key, as their JSON text (UTF-8; see `record-json.ts`). */
  get data(): Database<Buffer, Buffer> {
    return this.env.db<Buffer, Buffer>('data', DATA_OPTIONS);
  }

  /** `schema` and `commit` entries. */
  get meta(): Database<unknown, string> {
    return this.env.db<unknown, string>('meta');
  }
}

/** What the `schema` meta entry of a cache holds. */
export interface StoredSchema {
  name: string;
  endpoint: string;
  schema: CacheSchema;
  schemaHash: string;
  createdAt: string;
  /**
   * The stored record form (`RECORD_FORMAT` of record-json.ts). Absent in caches written before records were
   * stored as JSON text (MessagePack): those are refused and rebuilt.
   */
  recordFormat?: number;
  /**
   * Fields the writer added after the generation was created (`RwCache.addFields`: columns its source gained), in
   * the order they came; rewritten in the transaction of the commit that first holds them. Part of the schema
   * readers query with (declared after `schema`'s own fields), not of its identity: `schema` and `schemaHash` stay
   * as created, so a restart comparing them continues the generation. Absent until a field is added.
   */
  addedFields?: Record<string, FieldType>;
}

export const EMPTY_COMMIT: CommitState = {
  checkpoint: null,
  committedAt: null,
  recordCount: 0,
  snapshottingDone: [],
};

function indexDbName(fields: readonly string[]): string {
  return `index:${createHash('sha256').update(indexId(fields)).digest('hex').slice(0, 24)}`;
}

/** Opens (creating, in a writable environment) the databases a cache with `schema` uses. */
export function cacheDbs(
  env: SharedEnv,
  schema: CacheSchema,
  options: { covering?: boolean } = {},
): CacheDbs {
  return new CacheDbs(env, schema, options);
}

/** The value of `field` in a record; a missing field is null (the query language's rule). */
export function fieldValue(record: Record<string, unknown>, field: string): unknown {
  return Object.hasOwn(record, field) ? record[field] : null;
}

/** The data key of a record with primary-key values `key`. */
export function dataKey(dbs: CacheDbs, key: readonly unknown[]): Buffer {
  return encodeKey(key, dbs.keyBudget);
}

/** The key of `record` in `index`: its index values followed by its primary key. */
export function indexKey(
  index: IndexDb,
  record: Record<string, unknown>,
  primaryKey: readonly string[],
): Buffer {
  const values: unknown[] = [];
  for (const field of index.fields) values.push(fieldValue(record, field));
  for (const field of primaryKey) values.push(record[field]);
  return encodeKey(values, index.budget);
}
