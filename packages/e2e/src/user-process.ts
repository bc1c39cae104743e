import { execFile } from 'node:child_process';
import { type ChildHandle, spawnProcess } from '@sluice/testkit';

/**
 * A command run the way a user runs it in a terminal: in a process group of its own, so `interrupt()` sends
 * SIGINT to the whole group exactly as Ctrl-C does (to pnpm and to the script it runs).
 */
export interface UserProcess extends ChildHandle {
  /** Ctrl-C: SIGINT to the process group. */
  interrupt(): void;
}

/**
 * Spawns `command` in its own process group with its output captured line by line (testkit's
 * `spawnProcess`). On dispose a process still running gets Ctrl-C (SIGINT), then SIGKILL after 30 s.
 *
 * @example
 * ```ts
 * await using start = runAsUser('pnpm', ['start'], { cwd: repoRoot, env: { SLUICE_PORT: '17070' } });
 * await start.waitForLine(/Press Ctrl-C/, 60_000);
 * start.interrupt();
 * expect((await start.exited).code).toBe(0);
 * ```
 */
export function runAsUser(
  command: string,
  args: string[],
  options: { cwd: string; env?: Record<string, string | undefined> },
): UserProcess {
  const handle = spawnProcess(command, args, {
    cwd: options.cwd,
    env: options.env,
    maxLines: 10_000,
    detached: true,
    // The quick start's servers write to the same pipes: the run is over once they are closed too.
    exitOn: 'close',
    // Ctrl-C first: the quick start stops the servers it started (they run in process groups of their own).
    dispose: { signal: 'SIGINT', graceMs: 30_000 },
  });
  return Object.assign(handle, { interrupt: () => handle.kill('SIGINT') });
}

/**
 * The processes descending from `pid` with their command lines (read from `ps`), e.g. the servers a script
 * started in process groups of their own.
 *
 * @example
 * ```ts
 * const api = (await descendants(start.pid)).find((p) => p.args.includes('api-server'));
 * ```
 */
export async function descendants(pid: number): Promise<Array<{ pid: number; args: string }>> {
  const text = await new Promise<string>((resolve, reject) =>
    execFile('ps', ['-eo', 'pid=,ppid=,args='], { maxBuffer: 8 * 1024 * 1024 }, (err, stdout) =>
      err ? reject(err) : resolve(stdout),
    ),
  );
  const rows = text
    .split('\n')
    .map((line) => /^\s*(\d+)\s+(\d+)\s+(.*)$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => ({ pid: Number(m[1]), ppid: Number(m[2]), args: m[3] ?? '' }));
  const out: Array<{ pid: number; args: string }> = [];
  const queue = [pid];
  while (queue.length > 0) {
    const parent = queue.shift()!;
    for (const row of rows)
      if (row.ppid === parent) {
        out.push({ pid: row.pid, args: row.args });
        queue.push(row.pid);
      }
  }
  return out;
}
