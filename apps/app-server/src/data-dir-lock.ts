import { existsSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, isProcessAlive, readPidFile } from '@sluice/core';
import { DataDirAccess, prepareDataDir } from '@sluice/http';

/** What holds a data directory: the file naming the app-server process that writes its caches. */
export const DATA_DIR_LOCK_FILE = 'app-server.pid';

export interface DataDirLock {
  readonly path: string;
  release(): void;
}

function ageMs(file: string): number {
  try {
    return Date.now() - statSync(file).mtimeMs;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

const MUTEX_STALE_MS = 5_000;

function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * A takeover mutex is stale when the starter that made it is gone. Its pid is written inside it right after the
 * mkdir; a mutex without one is judged by age (its maker died between the two steps). Age alone would break the
 * mutex of a live starter the scheduler paused for a while, and two takeovers would then overlap.
 */
function mutexIsStale(mutex: string): boolean {
  const owner = readPidFile(join(mutex, 'owner'));
  if (owner !== null) return owner !== process.pid && !isProcessAlive(owner);
  return ageMs(mutex) > MUTEX_STALE_MS;
}

/** Removes `file` if, judged while holding `<file>.takeover`, it still names no live process. */
function removeStaleUnderMutex(file: string): void {
  const mutex = `${file}.takeover`;
  try {
    mkdirSync(mutex);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    // Another starter is taking over; a mutex whose maker is gone is a crashed starter's leftover.
    if (mutexIsStale(mutex)) rmSync(mutex, { recursive: true, force: true });
    else pause(20);
    return;
  }
  try {
    writeFileSync(join(mutex, 'owner'), `${process.pid}\n`);
    // Only removal happens under the mutex; creation (`wx`) does not. So an absent file must be left alone: a
    // starter may create its live lock between this read and an `rm`, and removing that would let two starters
    // hold the directory (seen as two LOCKED in the defect 8 race test under load).
    if (!existsSync(file)) return;
    const pid = readPidFile(file);
    const halfWritten = pid === null && ageMs(file) < 2_000;
    if (!halfWritten && (pid === null || pid === process.pid || !isProcessAlive(pid)))
      rmSync(file, { force: true });
  } finally {
    rmSync(mutex, { recursive: true, force: true });
  }
}

/**
 * Claims `dataDir` for this app-server. The caches under it have one writer (LMDB serializes writers, and two
 * pipelines of one endpoint would build competing generations), so a second app-server pointed at the same
 * directory is refused before it opens anything, naming the process that holds it. A file left by a process
 * that died (SIGKILL) is taken over. The liveness check uses the pid, so processes sharing a data directory
 * must share a pid namespace.
 *
 * @example
 * ```ts
 * const lock = lockDataDir('/var/lib/sluice');
 * try { ... } finally { lock.release(); }
 * ```
 */
export function lockDataDir(dataDir: string): DataDirLock {
  // A directory it may not write (or a file in its place) is the operator's to fix: CONFIG_INVALID naming dataDir.
  prepareDataDir(dataDir, DataDirAccess.READ_WRITE);
  const file = join(dataDir, DATA_DIR_LOCK_FILE);
  for (let attempt = 0; attempt < 100; attempt++) {
    try {
      writeFileSync(file, `${process.pid}\n`, { flag: 'wx' });
      let released = false;
      return {
        path: file,
        release() {
          if (released) return;
          released = true;
          if (readPidFile(file) === process.pid) rmSync(file, { force: true });
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const pid = readPidFile(file);
    if (pid === null && ageMs(file) < 2_000) {
      // Just created by a process that has not written its pid yet.
      pause(50);
      continue;
    }
    if (pid !== null && pid !== process.pid && isProcessAlive(pid))
      throw new ConfigError(
        `Another app-server (pid ${pid}) is using the data directory ${dataDir}; each host's dataDir has one app-server (stop it, or give this one another dataDir)`,
        [{ path: 'dataDir', message: `in use by pid ${pid} (${file})` }],
      );
    // Stale (its process is gone) or half-written. Removing it must not race another starter that already
    // replaced it with its own live lock (issue 13, defect 8): the removal happens under a takeover mutex (an
    // atomic mkdir), and the file is judged again inside it.
    removeStaleUnderMutex(file);
  }
  throw new ConfigError(`Could not claim the data directory ${dataDir} (${file} keeps changing)`, [
    { path: 'dataDir', message: 'contended' },
  ]);
}
