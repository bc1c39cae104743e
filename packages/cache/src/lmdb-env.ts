import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ErrorCode, SluiceError } from '@sluice/core';
import { type Database, type DatabaseOptions, open, type RootDatabase } from 'lmdb';

/** One LMDB environment, shared by every handle of this process. */
export interface SharedEnv {
  readonly path: string;
  readonly readOnly: boolean;
  readonly root: RootDatabase;
  /** A named database (opened once, then cached). */
  db<V = unknown, K extends import('lmdb').Key = import('lmdb').Key>(
    name: string,
    options?: DatabaseOptions,
  ): Database<V, K>;
}

interface Entry {
  env: SharedEnv;
  refs: number;
}

/**
 * LMDB must not open one environment twice in a process, so every environment of this process is opened once
 * here and shared by reference count (also between several managers on one root).
 */
const openEnvs = new Map<string, Entry>();

function create(path: string, readOnly: boolean): SharedEnv {
  const root = open({ path, maxDbs: 64, noSubdir: false, readOnly, maxReaders: 1022 }) as RootDatabase;
  const dbs = new Map<string, Database<unknown, import('lmdb').Key>>();
  return {
    path,
    readOnly,
    root,
    db<V, K extends import('lmdb').Key>(name: string, options: DatabaseOptions = {}) {
      let db = dbs.get(name);
      if (!db) {
        db = root.openDB<unknown, import('lmdb').Key>({ name, ...options });
        dbs.set(name, db);
      }
      return db as unknown as Database<V, K>;
    },
  };
}

/**
 * Opens (or shares) the environment at `path`; `releaseEnv` when done. Readers open LMDB read-only, which never
 * waits for the writer's lock (a read-write open does, while a commit runs). A reader of a not-yet-created
 * environment opens it read-write (creating it).
 */
export function acquireEnv(path: string, readOnly: boolean): SharedEnv {
  const entry = openEnvs.get(path);
  if (entry) {
    if (entry.env.readOnly && !readOnly)
      throw new SluiceError(
        ErrorCode.INTERNAL,
        `LMDB environment ${path} is open read-only in this process; open the writer before any reader`,
      );
    entry.refs += 1;
    return entry.env;
  }
  const env = create(path, readOnly && existsSync(join(path, 'data.mdb')));
  openEnvs.set(path, { env, refs: 1 });
  return env;
}

/** Drops one reference; closes the environment with the last one. */
export async function releaseEnv(path: string): Promise<void> {
  const entry = openEnvs.get(path);
  if (!entry) return;
  entry.refs -= 1;
  if (entry.refs > 0) return;
  openEnvs.delete(path);
  await entry.env.root.close();
}

/** True while any handle of this process has the environment at `path` open. */
export function isEnvOpen(path: string): boolean {
  return openEnvs.has(path);
}

/**
 * Process ids (other than ours) holding reader slots in the environment's lock table, i.e. other processes
 * that have it open. Stale slots of dead processes are cleared first.
 */
export function otherReaderPids(env: SharedEnv): number[] {
  env.root.readerCheck();
  const pids = new Set<number>();
  for (const line of env.root.readerList().split('\n')) {
    const match = /^\s*(\d+)\s+[0-9a-f]+\s+/i.exec(line);
    if (match) {
      const pid = Number(match[1]);
      if (pid !== process.pid) pids.add(pid);
    }
  }
  return [...pids];
}
