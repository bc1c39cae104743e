import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { type Database, type DatabaseOptions, open, type RootDatabase } from 'lmdb';

type AnyKey = import('lmdb').Key;

/**
 * One LMDB environment, shared by every handle of this process. Databases are looked up through it on each use
 * (`db(name)` is a map lookup), so the environment can be reopened underneath its handles (see `acquireEnv`).
 */
export class SharedEnv {
  readonly path: string;
  private currentRoot: RootDatabase;
  private writable: boolean;
  private readonly dbs = new Map<string, Database<unknown, AnyKey>>();
  private readonly dbOptions = new Map<string, DatabaseOptions>();

  constructor(path: string, readOnly: boolean) {
    this.path = path;
    this.writable = !readOnly;
    this.currentRoot = SharedEnv.openRoot(path, readOnly);
  }

  private static openRoot(path: string, readOnly: boolean): RootDatabase {
    return open({ path, maxDbs: 64, noSubdir: false, readOnly, maxReaders: 1022 }) as RootDatabase;
  }

  get readOnly(): boolean {
    return !this.writable;
  }

  get root(): RootDatabase {
    return this.currentRoot;
  }

  /** A named database (opened once per environment opening, then cached). */
  db<V = unknown, K extends AnyKey = AnyKey>(name: string, options: DatabaseOptions = {}): Database<V, K> {
    let db = this.dbs.get(name);
    if (!db) {
      this.dbOptions.set(name, options);
      db = this.currentRoot.openDB<unknown, AnyKey>({ name, ...options });
      this.dbs.set(name, db);
    }
    return db as unknown as Database<V, K>;
  }

  /**
   * Reopens a read-only environment read-write (a writer appeared in a process that so far only read). LMDB
   * cannot have one environment open twice in a process, so the read-only one is closed first.
   */
  async upgrade(): Promise<void> {
    if (this.writable) return;
    const old = this.currentRoot;
    this.dbs.clear();
    await old.close();
    this.currentRoot = SharedEnv.openRoot(this.path, false);
    this.writable = true;
    for (const [name, options] of this.dbOptions) this.db(name, options);
  }
}

interface Entry {
  env: SharedEnv;
  refs: number;
  /** Set while the entry is being upgraded to read-write. */
  upgrading: Promise<void> | null;
}

/**
 * LMDB must not open one environment twice in a process, so every environment of this process is opened once
 * here and shared by reference count (also between several managers on one root).
 */
const openEnvs = new Map<string, Entry>();

/**
 * Opens (or shares) the environment at `path`; `releaseEnv` when done. Readers open LMDB read-only, which never
 * waits for the writer's lock (a read-write open does, while a commit runs); a reader of a not-yet-created
 * environment opens it read-write (creating it). A writer joining a read-only environment of this process
 * reopens it read-write for everyone.
 */
export async function acquireEnv(path: string, readOnly: boolean): Promise<SharedEnv> {
  const entry = openEnvs.get(path);
  if (entry) {
    entry.refs += 1;
    try {
      if (entry.upgrading) await entry.upgrading;
      if (!readOnly && entry.env.readOnly) {
        entry.upgrading = entry.env.upgrade();
        try {
          await entry.upgrading;
        } finally {
          entry.upgrading = null;
        }
      }
    } catch (err) {
      await releaseEnv(path);
      throw err;
    }
    return entry.env;
  }
  const env = new SharedEnv(path, readOnly && existsSync(join(path, 'data.mdb')));
  openEnvs.set(path, { env, refs: 1, upgrading: null });
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
