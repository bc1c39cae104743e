import {
  CacheClosedError,
  type CacheSchema,
  type CommitState,
  type FieldType,
  type Filter,
  InvalidQueryError,
  type JsonPage,
  type JsonPageFrame,
  type Query,
  type QueryResult,
  type ReadableCache,
  type ReadScope,
} from '@sluice/core';
import { type CacheDbs, dataKey, type StoredSchema } from './cache-dbs.js';
import { ChangeLogReader, type ChangeRetention } from './change-log.js';
import { truncatedComponentEnd, writeNumberComponent } from './key-codec.js';
import { releaseEnv } from './lmdb-env.js';
import { Arena, withArena } from './page-arena.js';
import { checkQuery, scopedFilter } from './query-check.js';
import { countBeyondScanCap, runCount, runQuery } from './query-exec.js';
import { fieldsOf, rowsJson } from './query-rows.js';
import type { ReadContext } from './query-scan.js';
import { decodeRecord } from './record-json.js';
import { keyProblem, storedKey, withAddedFields } from './schema.js';
import { slabCopy } from './slab.js';
import { storedCommit } from './spilled-commit.js';

/** core's {@link JsonPage} with its bytes as what they are here, a Node `Buffer` (the port names a `Uint8Array`). */
export type BufferJsonPage = JsonPage & { json: Buffer };

/** True when an encoded key has a truncated (prefix + hash) component. */
function isTruncatedKey(key: Buffer, components: number): boolean {
  return truncatedComponentEnd(key, components) >= 0;
}

/** Settings a cache handle reads queries with. */
export interface ReadSettings {
  scanCap: number;
  defaultLimit: number;
  maxLimit: number;
  /** Largest `$in` list of a query's filter. */
  maxIn: number;
  /** Deepest `$and` / `$or` nesting of a query's filter. */
  maxDepth: number;
  /** Change-log retention applied by commits of writable handles. */
  changes: ChangeRetention;
  /** Records a bulk load writes with their index entries before it defers the rest to an index build. */
  deferIndexesFrom: number;
  /** Staged changes a writer holds in memory before it moves them to the generation's staging area (staging.ts). */
  stagedInMemory: number;
}

/** Everything a handle needs; built by the manager. */
export interface CacheHandleInit {
  name: string;
  endpoint: string;
  /** The schema the generation was created with (its identity). */
  schema: CacheSchema;
  /** Fields its writer added since, as its stored schema entry lists them. */
  addedFields?: Record<string, FieldType>;
  dbs: CacheDbs;
  settings: ReadSettings;
  /** Called once when the handle closes (the manager forgets it). */
  onClose?: () => void;
}

/**
 * A read-only view of one cache generation. Every call reads the latest commit, in one snapshot, so records,
 * counts and the commit state always agree; another process's commits are visible without reopening.
 * Readers never block the writer.
 *
 * @example
 * ```ts
 * await using cache = await manager.openRo('items');
 * cache.get([42]);
 * const { records, next } = cache.query(parseQuery({ $filter: { value: { $gte: 10 } }, $order_by: { value: 'asc' } }));
 * ```
 */
export class RoCache implements ReadableCache {
  readonly name: string;
  readonly endpoint: string;
  /** The schema the generation was created with: keys are checked against it (added fields are never key fields). */
  protected readonly identity: CacheSchema;
  /** The schema as the stored entry last read said (`raw`: that entry's bytes; null before the first read). */
  private stored: { raw: Buffer | null; schema: CacheSchema };
  protected readonly dbs: CacheDbs;
  protected readonly settings: ReadSettings;
  protected closed = false;
  private readonly keyScratch = Buffer.allocUnsafe(9);
  private readonly onClose: (() => void) | undefined;

  constructor(init: CacheHandleInit) {
    this.name = init.name;
    this.endpoint = init.endpoint;
    this.identity = init.schema;
    this.stored = { raw: null, schema: withAddedFields(init.schema, init.addedFields) };
    this.dbs = init.dbs;
    this.settings = init.settings;
    this.onClose = init.onClose;
  }

  /**
   * The generation's schema as of the latest commit this process can see: the one it was created with plus the
   * fields its writer added since (`RwCache.addFields`), so a reader that keeps the generation open sees them. A new
   * object when it changed, the same one otherwise.
   */
  get schema(): CacheSchema {
    return this.schemaIn();
  }

  /**
   * The stored schema entry, read in `transaction` (else the current read snapshot) and decoded only when its bytes
   * changed since the last read (a comparison of a few hundred bytes: cheap enough for every query).
   */
  protected schemaIn(transaction?: ReadContext['transaction']): CacheSchema {
    if (this.closed) return this.stored.schema;
    const options = transaction ? { transaction } : undefined;
    const getFast = this.dbs.meta.getBinaryFast as (key: string, options?: unknown) => Buffer | undefined;
    const fast = getFast.call(this.dbs.meta, 'schema', options);
    // Generations written before the entry existed (format 2) have none: their schema is the catalogue's.
    if (fast === undefined) return this.stored.schema;
    // A view of exactly the value: the read buffer is larger than its (overridden) length says.
    const raw = new Uint8Array(fast.buffer, fast.byteOffset, fast.length);
    if (this.stored.raw?.equals(raw)) return this.stored.schema;
    const copy = Buffer.from(raw);
    const entry = this.dbs.meta.get('schema', options) as StoredSchema | undefined;
    const schema = withAddedFields(this.identity, entry?.addedFields);
    const same = sameFields(schema, this.stored.schema);
    this.stored = { raw: copy, schema: same ? this.stored.schema : schema };
    return this.stored.schema;
  }

  /** True once {@link close} was called. */
  get isClosed(): boolean {
    return this.closed;
  }

  protected assertOpen(): void {
    if (this.closed) throw new CacheClosedError(this.name);
  }

  /**
   * The record with these primary-key values (in primary-key order), or undefined.
   * A key of the wrong shape or type is an `INVALID_QUERY`.
   */
  get(key: unknown[]): Record<string, unknown> | undefined {
    const bytes = this.getJson(key);
    return bytes === undefined ? undefined : decodeRecord(bytes);
  }

  /**
   * The stored JSON text (UTF-8) of the record with these primary-key values, or undefined: the bytes a
   * response sends as they are (see `record-json.ts` for the field order). Same checks as {@link get}.
   *
   * @example
   * ```ts
   * const bytes = cache.getJson([42]); // Buffer of '{"id":42,…}'
   * ```
   */
  getJson(given: unknown[]): Buffer | undefined {
    this.assertOpen();
    const problem = keyProblem(this.identity, given);
    if (problem) throw new InvalidQueryError(`Invalid key: ${problem}`, [{ path: 'key', message: problem }]);
    // A timestamp component is looked up in its stored (canonical) form.
    const key = storedKey(this.identity, given);
    const single = key.length === 1 ? key[0] : undefined;
    if (typeof single === 'number') {
      // Hot path: a numeric key is encoded into a reused buffer (LMDB copies it) and is never truncated.
      return this.readJson(writeNumberComponent(this.keyScratch, single));
    }
    const encoded = dataKey(this.dbs, key);
    const bytes = this.readJson(encoded);
    if (bytes === undefined || !isTruncatedKey(encoded, key.length)) return bytes;
    // Long keys are stored as prefix + hash: make sure this is the record asked for.
    const record = decodeRecord(bytes);
    const pk = this.identity.primaryKey;
    for (let i = 0; i < pk.length; i++) if (record[pk[i]!] !== key[i]) return undefined;
    return bytes;
  }

  /**
   * The stored bytes under a data key, copied out of lmdb-js's shared read buffer (which the next read
   * overwrites) into a slab: `get` would make each its own ArrayBuffer (src/slab.ts).
   */
  private readJson(key: Buffer): Buffer | undefined {
    const shared = this.dbs.data.getBinaryFast(key);
    return shared === undefined ? undefined : slabCopy(shared);
  }

  /**
   * Answers a query (core's `parseQuery` output): filter, order (ties broken by primary key), `limit`, and
   * `skip` or an `after` cursor. Uses an index when one fits; otherwise scans at most `scanCap` records: a scan in
   * the query's order that stops there says `plan.capped` and its `next` continues it; a query sorted in memory
   * whose records to sort are more than that is refused (`INVALID_QUERY` at `$order_by`), since the records it did
   * not see may come first.
   */
  query(query: Query | Partial<Query>, scope?: ReadScope): QueryResult {
    this.assertOpen();
    // Checked against the schema of the snapshot it reads: a field added by that commit is known.
    const page = this.read(
      (ctx, schema) => runQuery(ctx, checkQuery(query, schema, this.settings, scope)),
      hasCursor(query),
    );
    return { records: page.rows.map(fieldsOf), next: page.next, plan: page.plan };
  }

  /**
   * The same query, answered with each record's stored JSON text and the commit state of the same read
   * snapshot: a server assembles its response from these bytes without decoding or re-serializing records
   * (they are decoded only where the plan needs fields). With a `frame`, `json` is the whole response body
   * (head, the array, tail) in one buffer. `state` is one shared, frozen object per commit (compare by
   * identity to reuse what was derived from it, e.g. a header).
   *
   * @example
   * ```ts
   * const { json, next, state } = cache.queryJson(parseQuery(body)); // json: Buffer of '[{…},{…}]'
   * const page = cache.queryJson(parseQuery(body), {
   *   head: '{"records":',
   *   tail: (next) => `,"next":${JSON.stringify(next)}}`,
   * }); // page.json: the body, '{"records":[…],"next":…}'
   * ```
   */
  queryJson(query: Query | Partial<Query>, frame?: JsonPageFrame, scope?: ReadScope): BufferJsonPage {
    this.assertOpen();
    return this.read((ctx, schema) => {
      const checked = checkQuery(query, schema, this.settings, scope);
      const state = this.servingState(ctx.transaction);
      const page = runQuery(ctx, checked);
      const json = rowsJson(
        page.rows,
        frame === undefined ? undefined : { head: frame.head, tail: frame.tail(page.next) },
      );
      return { json, count: page.rows.length, next: page.next, plan: page.plan, state };
    }, hasCursor(query));
  }

  /**
   * The commit state as one frozen object per commit: re-decoded only when the stored state's bytes changed
   * (a cheap comparison), so per-commit derivations can be cached by identity.
   */
  servingState(transaction?: ReadContext['transaction']): Readonly<CommitState> {
    const options = transaction ? { transaction } : undefined;
    if (!transaction) this.dbs.env.root.resetReadTxn();
    // The raw (still encoded) entry, read without a copy (LMDB's reused read buffer), compared with the last
    // one seen; copied only when it changed (once per commit).
    const getFast = this.dbs.meta.getBinaryFast as (key: string, options?: unknown) => Buffer | undefined;
    const fast = getFast.call(this.dbs.meta, 'commit', options);
    // A view of exactly the value: the read buffer is larger than its (overridden) length says.
    const raw = fast === undefined ? undefined : new Uint8Array(fast.buffer, fast.byteOffset, fast.length);
    const memo = this.stateMemo;
    if (memo && raw !== undefined && memo.raw.equals(raw)) return memo.state;
    const copy = raw === undefined ? undefined : Buffer.from(raw);
    const state = Object.freeze(this.readCommit(transaction));
    if (copy !== undefined) this.stateMemo = { raw: copy, state };
    return state;
  }

  private stateMemo: { raw: Buffer; state: Readonly<CommitState> } | undefined;
  /** Where this handle's index scans copy records to (one read at a time). */
  private readonly arena = new Arena();

  /**
   * How many records match `filter` (and `scope`'s row filter, checked on its own: core's `ReadScope`). A filter
   * that no index narrows to at most `scanCap` records to check is refused (`INVALID_QUERY` at `$filter`).
   */
  count(filter: Filter = {}, scope: ReadScope = {}): number {
    const count = this.countWithinCap(filter, scope);
    if (count === null) throw countBeyondScanCap(this.settings.scanCap);
    return count;
  }

  /** {@link count}, or null where it would be refused for checking more than `scanCap` records. */
  countWithinCap(filter: Filter = {}, scope: ReadScope = {}): number | null {
    this.assertOpen();
    return this.read((ctx, schema) => {
      const checked = scopedFilter(filter, schema, this.settings, scope);
      if (Object.keys(checked).length === 0) return this.readCommit(ctx.transaction).recordCount;
      return runCount(ctx, checked);
    });
  }

  /** The checkpoint, commit instant, record count and snapshot flags of the latest commit. */
  commitState(): CommitState {
    this.assertOpen();
    return this.read((ctx) => this.readCommit(ctx.transaction));
  }

  protected readCommit(transaction?: ReadContext['transaction']): CommitState {
    return storedCommit(this.dbs, transaction);
  }

  /**
   * Runs `fn` in a fresh read snapshot, with the schema of that snapshot. With `log`, the change log is opened first
   * (a cursor's position may be looked up there; opening it inside the snapshot would end the snapshot).
   */
  protected read<T>(fn: (ctx: ReadContext, schema: CacheSchema) => T, log = false): T {
    const logReady = log && this.changeLog().ready();
    // Start from the latest commit, even one made by another process earlier in this event turn.
    this.dbs.env.root.resetReadTxn();
    const transaction = this.dbs.env.root.useReadTransaction();
    const arena = this.arena;
    arena.reset();
    try {
      const schema = this.schemaIn(transaction);
      return withArena(arena, () =>
        fn(
          {
            arena,
            dbs: this.dbs,
            cache: this.name,
            primaryKey: schema.primaryKey,
            transaction,
            scanCap: this.settings.scanCap,
            fields: schema.fields,
            logReady,
          },
          schema,
        ),
      );
    } finally {
      transaction.done();
    }
  }

  /**
   * This generation's change log (head, entries after a sequence, pinned snapshots). Reads see the latest
   * commit, another process's included.
   *
   * @example
   * ```ts
   * const log = cache.changeLog();
   * const { last } = log.head();
   * for (const change of log.read(last - 10, 100)) console.log(change.seq, change.op);
   * ```
   */
  changeLog(): ChangeLogReader {
    this.assertOpen();
    this.changeReader ??= new ChangeLogReader(this.dbs);
    return this.changeReader;
  }

  private changeReader: ChangeLogReader | undefined;

  /** Closes the handle (the environment closes when its last handle does). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.onClose?.();
    await releaseEnv(this.dbs.env.path);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** Whether two schemas of one generation have the same fields (theirs only grow: same count, same fields). */
function sameFields(a: CacheSchema, b: CacheSchema): boolean {
  return Object.keys(a.fields).length === Object.keys(b.fields).length;
}

/** True when a query continues from a cursor (whose position the change log may have to place). */
function hasCursor(query: Query | Partial<Query>): boolean {
  return typeof query === 'object' && query !== null && typeof query.after === 'string';
}
