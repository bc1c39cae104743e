import { type ChildProcess, execFile, spawn } from 'node:child_process';

/** How a process ended. */
export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/**
 * A command run the way a user runs it in a terminal: in a process group of its own, so `interrupt()` sends
 * SIGINT to the whole group exactly as Ctrl-C does (to pnpm and to the script it runs).
 */
export interface UserProcess extends AsyncDisposable {
  readonly child: ChildProcess;
  readonly pid: number;
  /** stdout and stderr lines, in arrival order. */
  readonly lines: string[];
  readonly exited: Promise<ExitInfo>;
  /** Resolves with the first line matching `pattern` (seen already or to come); rejects on exit or timeout. */
  waitForLine(pattern: RegExp, timeoutMs: number): Promise<string>;
  /** Ctrl-C: SIGINT to the process group. */
  interrupt(): void;
  output(): string;
}

/** Largest number of output lines kept (the quick start prints a few dozen). */
const MAX_LINES = 10_000;

/**
 * Spawns `command` in its own process group with its output captured line by line. On dispose a process
 * still running gets Ctrl-C (SIGINT), then SIGKILL after 30 s.
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
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: { ...process.env, ...options.env } as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const lines: string[] = [];
  const waiters = new Set<{ pattern: RegExp; resolve: (line: string) => void }>();
  let exitInfo: ExitInfo | null = null;
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('close', (code, signal) => {
      exitInfo = { code, signal };
      resolve(exitInfo);
    });
    child.once('error', (err) => {
      lines.push(`[spawn error] ${err.message}`);
      exitInfo = { code: -1, signal: null };
      resolve(exitInfo);
    });
  });
  const capture = (stream: NodeJS.ReadableStream) => {
    let buffer = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      buffer += chunk;
      for (let index = buffer.indexOf('\n'); index >= 0; index = buffer.indexOf('\n')) {
        const line = buffer.slice(0, index);
        buffer = buffer.slice(index + 1);
        lines.push(line);
        if (lines.length > MAX_LINES) lines.splice(0, lines.length - MAX_LINES);
        for (const waiter of waiters) {
          if (waiter.pattern.test(line)) {
            waiters.delete(waiter);
            waiter.resolve(line);
          }
        }
      }
    });
  };
  capture(child.stdout!);
  capture(child.stderr!);
  const pid = child.pid ?? -1;
  const signalGroup = (signal: NodeJS.Signals) => {
    if (exitInfo !== null || pid < 0) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // the group is already gone
    }
  };
  const tail = () => lines.slice(-60).join('\n');
  return {
    child,
    pid,
    lines,
    exited,
    waitForLine(pattern, timeoutMs) {
      const seen = lines.find((line) => pattern.test(line));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise<string>((resolve, reject) => {
        const waiter = {
          pattern,
          resolve: (line: string) => {
            clearTimeout(timer);
            resolve(line);
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(new Error(`Timed out after ${timeoutMs} ms waiting for ${pattern}; output:\n${tail()}`));
        }, timeoutMs);
        waiters.add(waiter);
        void exited.then((info) => {
          if (!waiters.has(waiter)) return;
          waiters.delete(waiter);
          clearTimeout(timer);
          reject(
            new Error(`Exited (${info.code ?? info.signal}) before printing ${pattern}; output:\n${tail()}`),
          );
        });
      });
    },
    interrupt: () => signalGroup('SIGINT'),
    output: () => lines.join('\n'),
    async [Symbol.asyncDispose]() {
      if (exitInfo !== null) return;
      // Ctrl-C first: the quick start stops the servers it started (they run in process groups of their own).
      signalGroup('SIGINT');
      const timer = setTimeout(() => signalGroup('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    },
  };
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
