/**
 * One cache generation's files under the root: `<root>/caches/<name>/`, one LMDB environment. Opening it for a
 * handle, describing it for `list`/`info`, and asking whether another process still reads it. Moved out of
 * manager.ts so the manager holds only the catalogue and its handles.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { type CacheInfo, CacheNotFoundError, type CommitState } from '@sluice/core';
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
 * the current one only in its index entries, so a generation written by the previous version keeps serving
 * (one data lookup per index entry) while the app-server rebuilds it in the current format — an upgrade costs
 * no failed request. Writers accept only {@link RECORD_FORMAT}: mixed entries would answer wrongly.
 */
const READABLE_FORMATS: ReadonlySet<number> = new Set([2, RECORD_FORMAT]);

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
    const format = stored === undefined ? RECORD_FORMAT : (stored.recordFormat ?? 1);
    if (purpose === 'write' ? format !== RECORD_FORMAT : !READABLE_FORMATS.has(format))
      throw new RecordFormatError(meta.name, stored ?? {});
    const schema = stored?.schema ?? meta.schema;
    return {
      dbs: cacheDbs(env, schema, { covering: format === RECORD_FORMAT }),
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
    const env = await acquireEnv(path, readOnly);
    try {
      env.root.resetReadTxn();
      commit = (env.db<CommitState, string>('meta').get('commit') as CommitState | undefined) ?? EMPTY_COMMIT;
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
  const env = await acquireEnv(path, false);
  try {
    return otherReaderPids(env).length > 0;
  } finally {
    await releaseEnv(path);
  }
}
