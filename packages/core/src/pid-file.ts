import { readFileSync } from 'node:fs';

/**
 * True when a process with this pid exists (in this pid namespace); a process of another user counts (EPERM).
 *
 * @example
 * ```ts
 * if (!isProcessAlive(pid)) takeOverTheLock();
 * ```
 */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The pid written in a lock or pid file, or `null` when the file is missing, empty (still being written) or
 * holds anything else.
 *
 * @example
 * ```ts
 * const owner = readPidFile('/var/lib/sluice/app-server.pid');
 * ```
 */
export function readPidFile(path: string): number | null {
  try {
    const pid = Number(readFileSync(path, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}
