/**
 * One cache generation's files under the root: `<root>/caches/<name>/`, one LMDB environment. Opening it for a
 * handle, describing it for `list`/`info`, and asking whether another process still reads it. Moved out of
 * manager.ts so the manager holds only the catalogue and its handles.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import {
  type CacheInfo,
  CacheNotFoundError,
  type CacheSchema,
  type CommitState,
  SluiceError,
} from '@sluice/core';
import type { CacheMeta } from './alias-table.js';
import { cacheDbs, EMPTY_COMMIT, type StoredSchema } from './cache-dbs.js';
import { RecordFormatError } from './errors.js';
import { acquireEnv, otherReaderPids, releaseEnv } from './lmdb-env.js';
import { RECORD_FORMAT } from './record-json.js';

/** The directory of generation `name` under `rootDir`. */
export function cachePath(rootDir: string, name: string): string {
  return join(rootDir, 'caches', name);
}

/**
 * Record formats a reader can still serve: format 2 (JSON text, index entries holding the data key) differs from
 * format 3 only in its index entries, and format 3 from the current one only in how `timestamp` values are
 * written (as their source spelled them, compared as text), so a generation written by an earlier version keeps
 * serving while the app-server rebuilds it in the current format — an upgrade costs no failed request (until the
 * rebuild, timestamp comparisons in a format-3 generation are its old, textual ones). Writers accept only
 * {@link RECORD_FORMAT}: mixed entries would answer wrongly.
 */
const READABLE_FORMATS: ReadonlySet<number> = new Set([2, 3, RECORD_FORMAT]);

/**
 * The format a generation's records are in, as this version reads them: a format-3 generation without a
 * `timestamp` field is byte for byte what format 4 writes (only timestamp values changed), so it is written on
 * as it is — an upgrade rebuilds only the endpoints that have timestamp fields.
 */
function effectiveFormat(format: number, schema: CacheSchema): number {
  return format === 3 && !Object.values(schema.fields).includes('timestamp') ? RECORD_FORMAT : format;
}

/**
 * Opens the environment of the generation `meta` names (at `path`) and its databases, for `purpose`; a record
 * format this code cannot read (or, for writing, write) is refused. The caller releases the environment when
 * the handle closes.
 */
export async function openGenerationEnv(
  path: string,
  meta: CacheMeta,
  readOnly: boolean,
  purpose: 'read' | 'write',
) {
  if (!existsSync(join(path, 'data.mdb'))) throw new CacheNotFoundError(meta.name);
  const env = await acquireEnv(path, readOnly);
  try {
    const stored = env.db<StoredSchema, string>('meta').get('schema');
    const schema = stored?.schema ?? meta.schema;
    const format = stored === undefined ? RECORD_FORMAT : effectiveFormat(stored.recordFormat ?? 1, schema);
    if (purpose === 'write' ? format !== RECORD_FORMAT : !READABLE_FORMATS.has(format))
      throw new RecordFormatError(meta.name, stored ?? {});
    return {
      dbs: cacheDbs(env, schema, { covering: format >= 3 }),
      stored: stored ?? {
        name: meta.name,
        endpoint: meta.endpoint,
        schema,
        schemaHash: meta.schemaHash,
        createdAt: meta.createdAt,
      },
    };
  } catch (err) {
    await releaseEnv(path);
    throw err;
  }
}

/** What `list` and `info` say about the generation `meta` names (at `path`): its metadata, size and last commit. */
export async function describeGeneration(
  path: string,
  meta: CacheMeta,
  readOnly: boolean,
): Promise<CacheInfo> {
  let commit: CommitState = EMPTY_COMMIT;
  let sizeBytes = 0;
  if (existsSync(join(path, 'data.mdb'))) {
    sizeBytes = statSync(join(path, 'data.mdb')).size;
    const env = await acquireEnvUnlessDamaged(path, readOnly);
    if (env !== null)
      try {
        env.root.resetReadTxn();
        commit =
          (env.db<CommitState, string>('meta').get('commit') as CommitState | undefined) ?? EMPTY_COMMIT;
      } finally {
        await releaseEnv(path);
      }
  }
  return {
    name: meta.name,
    endpoint: meta.endpoint,
    createdAt: meta.createdAt,
    schemaHash: meta.schemaHash,
    schema: meta.schema,
    state: meta.state,
    retiredAt: meta.retiredAt,
    sizeBytes,
    recordCount: commit.recordCount,
    checkpoint: commit.checkpoint,
    committedAt: commit.committedAt,
    switchedAt: meta.switchedAt ?? null,
    notes: meta.notes ?? {},
  };
}

/** True when another live process holds a reader slot in the environment at `path`. */
export async function openElsewhere(path: string): Promise<boolean> {
  if (!existsSync(join(path, 'data.mdb'))) return false;
  // Nobody reads a damaged environment (no process can open it), so it can go.
  const env = await acquireEnvUnlessDamaged(path, false);
  if (env === null) return false;
  try {
    return otherReaderPids(env).length > 0;
  } finally {
    await releaseEnv(path);
  }
}

/**
 * The environment at `path`, or null when its files are damaged (`CACHE_DAMAGED`): listing a damaged generation, or
 * collecting it, must not fail — it is described with no commit, and the app-server rebuilds it.
 */
async function acquireEnvUnlessDamaged(path: string, readOnly: boolean) {
  try {
    return await acquireEnv(path, readOnly);
  } catch (err) {
    if (SluiceError.hasCode(err, 'CACHE_DAMAGED')) return null;
    throw err;
  }
}
