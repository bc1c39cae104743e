import { mkdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CacheBusyError, isProcessAlive, readPidFile } from '@sluice/core';

/**
 * A cross-process lock around opening and closing one LMDB environment.
 *
 * Why: LMDB's lock file holds process-shared robust mutexes. A process that closes an environment as its last
 * user destroys those mutexes; a process opening it at that moment can take the shared file lock right after
 * and find a valid lock region whose mutexes are destroyed. Every later transaction in that environment then
 * fails with EINVAL ("No transaction to renew", "Invalid argument") until every process has closed it. Taking
 * this lock for each open and each close makes the two never overlap, so an opener sees either a live region
 * or none (and initializes it).
 *
 * The lock is a directory (mkdir is atomic) holding the owner's pid; an owner that died (SIGKILL) leaves it
 * behind and the next process removes it.
 */

const LOCK_NAME = '.sluice-open.lock';
/**
 * Opens and closes take milliseconds, so a lock this old is stale whoever holds it: its owner may live in another
 * pid namespace (a container sharing the volume), where a pid says nothing about liveness.
 */
const STALE_AFTER_MS = 30_000;
/** A lock directory with no readable owner (its owner died between mkdir and writing it) is stale after this. */
const OWNERLESS_STALE_MS = 5_000;
const DEFAULT_WAIT_MS = 60_000;

export interface EnvOpenLock {
  release(): void;
}

type Attempt = { held: EnvOpenLock } | { ownerPid: number | null };

/** Locks this process holds; a lock naming our pid that is not here was left by an earlier process with our pid. */
const heldHere = new Set<string>();

const NO_LOCK: EnvOpenLock = { release() {} };

function lockPath(envPath: string): string {
  return join(envPath, LOCK_NAME);
}

function readOwner(dir: string): number | null {
  return readPidFile(join(dir, 'owner'));
}

function tryAcquire(envPath: string, create: boolean): Attempt {
  const dir = lockPath(envPath);
  if (create) mkdirSync(envPath, { recursive: true });
  try {
    mkdirSync(dir);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // No directory (deleted, nothing to open or close) or no right to write there (a read-only mount): there is
    // nothing to coordinate with, or no way to; go on without the lock.
    if (code === 'ENOENT' || code === 'EACCES' || code === 'EROFS' || code === 'EPERM')
      return { held: NO_LOCK };
    if (code !== 'EEXIST') throw err;
    const owner = readOwner(dir);
    if (isStale(dir, owner)) removeStale(dir, owner);
    return { ownerPid: owner };
  }
  writeFileSync(join(dir, 'owner'), String(process.pid));
  heldHere.add(dir);
  let released = false;
  return {
    held: {
      release() {
        if (released) return;
        released = true;
        heldHere.delete(dir);
        rmSync(dir, { recursive: true, force: true });
      },
    },
  };
}

function isStale(dir: string, owner: number | null): boolean {
  let ageMs: number;
  try {
    ageMs = Date.now() - statSync(dir).mtimeMs;
  } catch {
    return false; // gone already
  }
  if (ageMs > STALE_AFTER_MS) return true;
  if (owner === null) return ageMs > OWNERLESS_STALE_MS;
  if (owner === process.pid) return !heldHere.has(dir);
  return !isProcessAlive(owner);
}

/** Moves the stale lock aside first (rename is atomic), so two processes cleaning it up cannot both win. */
function removeStale(dir: string, owner: number | null): void {
  if (readOwner(dir) !== owner) return; // taken over in the meantime
  const aside = `${dir}.stale-${process.pid}-${Date.now()}`;
  try {
    renameSync(dir, aside);
  } catch {
    return;
  }
  rmSync(aside, { recursive: true, force: true });
}

function busy(envPath: string, ownerPid: number | null, waitMs: number): CacheBusyError {
  return new CacheBusyError(
    `The cache environment ${envPath} stayed locked by process ${ownerPid ?? '(unknown)'} for ${waitMs} ms while opening or closing it`,
    { path: envPath, ownerPid },
  );
}

/** Takes the open/close lock of the environment at `envPath`, waiting (asynchronously) while another holds it. */
export async function lockEnvOpen(
  envPath: string,
  options: { create: boolean; waitMs?: number },
): Promise<EnvOpenLock> {
  const waitMs = options.waitMs ?? DEFAULT_WAIT_MS;
  const deadline = Date.now() + waitMs;
  let delay = 1;
  for (;;) {
    const attempt = tryAcquire(envPath, options.create);
    if ('held' in attempt) return attempt.held;
    if (Date.now() > deadline) throw busy(envPath, attempt.ownerPid, waitMs);
    await sleep(delay);
    delay = Math.min(delay * 2, 50);
  }
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/**
 * The same lock, taken synchronously (for the process `exit` handler, which cannot await). Returns null when it
 * could not be had within `waitMs`.
 */
export function lockEnvOpenSync(envPath: string, waitMs: number): EnvOpenLock | null {
  const deadline = Date.now() + waitMs;
  for (;;) {
    let attempt: Attempt;
    try {
      attempt = tryAcquire(envPath, false);
    } catch {
      return null;
    }
    if ('held' in attempt) return attempt.held;
    if (attempt.ownerPid === process.pid || Date.now() > deadline) return null;
    Atomics.wait(sleeper, 0, 0, 2);
  }
}
