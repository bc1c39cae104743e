import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { type Database, type DatabaseOptions, open, type RootDatabase } from 'lmdb';
import { type EnvOpenLock, lockEnvOpen, lockEnvOpenSync } from './env-open-lock.js';
import { assertLmdbFile } from './lmdb-file-check.js';
import { forgetClosedEnv } from './lmdb-registry.js';

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
  private readonly dbOptions = new Map<string, { name: string; options: DatabaseOptions }>();

  constructor(path: string, readOnly: boolean) {
    this.path = path;
    this.writable = !readOnly;
    this.currentRoot = SharedEnv.openRoot(path, readOnly);
  }

  private static openRoot(path: string, readOnly: boolean): RootDatabase {
    assertLmdbFile(join(path, 'data.mdb'));
    return open({ path, maxDbs: 64, noSubdir: false, readOnly, maxReaders: 1022 }) as RootDatabase;
  }

  get readOnly(): boolean {
    return !this.writable;
  }

  get root(): RootDatabase {
    return this.currentRoot;
  }

  /**
   * A named database (opened once per environment opening, then cached). `handle` names a second handle on the
   * same database with other options (e.g. another value decoder); it defaults to the database's name.
   */
  db<V = unknown, K extends AnyKey = AnyKey>(
    name: string,
    options: DatabaseOptions = {},
    handle = name,
  ): Database<V, K> {
    let db = this.dbs.get(handle);
    if (!db) {
      this.dbOptions.set(handle, { name, options });
      db = this.currentRoot.openDB<unknown, AnyKey>({ name, ...options });
      this.dbs.set(handle, db);
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
    forgetClosedEnv(old);
    this.currentRoot = SharedEnv.openRoot(this.path, false);
    this.writable = true;
    for (const [handle, { name, options }] of this.dbOptions) this.db(name, options, handle);
  }
}

interface Entry {
  /** The environment once opened (or reopened read-write); replaced while an upgrade runs. */
  ready: Promise<SharedEnv>;
  /** The same, once opened (for the synchronous exit path, which cannot await `ready`). */
  env: SharedEnv | null;
  refs: number;
}

/**
 * LMDB must not open one environment twice in a process, so every environment of this process is opened once
 * here and shared by reference count (also between several managers on one root).
 */
const openEnvs = new Map<string, Entry>();
/** Environments of this process being closed; an open of the same path waits for the close to finish. */
const closing = new Map<string, Promise<void>>();

async function openLocked(path: string, readOnly: boolean): Promise<SharedEnv> {
  const lock = await lockEnvOpen(path, { create: !readOnly });
  try {
    return new SharedEnv(path, readOnly);
  } finally {
    lock.release();
    guardExit();
  }
}

async function upgradeLocked(env: SharedEnv): Promise<SharedEnv> {
  const lock = await lockEnvOpen(env.path, { create: true });
  try {
    await env.upgrade();
    return env;
  } finally {
    lock.release();
    guardExit();
  }
}

/**
 * At process exit lmdb closes every environment still open (read-write ones from its own `exit` listener,
 * read-only ones from a native cleanup hook), outside our open lock. So the first `exit` listener takes the
 * lock of each open environment and closes the read-only ones itself; the last one, after lmdb's, releases.
 */
const exitLocks: EnvOpenLock[] = [];
let exitGuarded = false;

function lockAllAtExit(): void {
  for (const [path, entry] of openEnvs) {
    const lock = lockEnvOpenSync(path, 2_000);
    if (lock) exitLocks.push(lock);
    // A read-only root closes synchronously (it has no pending writes to wait for).
    if (entry.env?.readOnly) void entry.env.root.close().catch(() => {});
  }
}

function releaseAllAtExit(): void {
  for (const lock of exitLocks.splice(0)) lock.release();
}

function guardExit(): void {
  if (!exitGuarded) {
    exitGuarded = true;
    process.prependListener('exit', lockAllAtExit);
  }
  // lmdb registers its exit listener at its first read-write open: keep ours after it.
  process.removeListener('exit', releaseAllAtExit);
  process.on('exit', releaseAllAtExit);
}

/**
 * Opens (or shares) the environment at `path`; `releaseEnv` when done. Readers open LMDB read-only, which never
 * waits for the writer's lock (a read-write open does, while a commit runs); a reader of a not-yet-created
 * environment opens it read-write (creating it). A writer joining a read-only environment of this process
 * reopens it read-write for everyone. Opening and closing take the environment's cross-process open lock
 * (see `env-open-lock.ts`).
 */
export async function acquireEnv(path: string, readOnly: boolean): Promise<SharedEnv> {
  for (let pending = closing.get(path); pending; pending = closing.get(path)) await pending;
  let entry = openEnvs.get(path);
  if (!entry) {
    const created: Entry = {
      refs: 0,
      env: null,
      ready: openLocked(path, readOnly && existsSync(join(path, 'data.mdb'))),
    };
    created.ready.then(
      (env) => {
        created.env = env;
      },
      () => {
        if (openEnvs.get(path) === created) openEnvs.delete(path);
      },
    );
    openEnvs.set(path, created);
    entry = created;
  }
  entry.refs += 1;
  try {
    for (;;) {
      const ready = entry.ready;
      const env = await ready;
      if (ready !== entry.ready) continue; // an upgrade started meanwhile
      if (readOnly || !env.readOnly) return env;
      entry.ready = ready.then(upgradeLocked);
    }
  } catch (err) {
    await releaseEnv(path);
    throw err;
  }
}

/** Drops one reference; closes the environment with the last one. */
export async function releaseEnv(path: string): Promise<void> {
  const entry = openEnvs.get(path);
  if (!entry) return;
  entry.refs -= 1;
  if (entry.refs > 0) return;
  openEnvs.delete(path);
  const closed = (async () => {
    let env: SharedEnv;
    try {
      env = await entry.ready;
    } catch {
      return; // never opened
    }
    const lock = await lockEnvOpen(path, { create: false });
    try {
      await env.root.close();
      forgetClosedEnv(env.root);
    } finally {
      lock.release();
    }
  })();
  closing.set(path, closed);
  try {
    await closed;
  } finally {
    if (closing.get(path) === closed) closing.delete(path);
  }
}

/** True while any handle of this process has the environment at `path` open. */
export function isEnvOpen(path: string): boolean {
  return openEnvs.has(path) || closing.has(path);
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
