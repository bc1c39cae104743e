import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

export interface SpawnOptions {
  cwd?: string;
  env?: Record<string, string | undefined>;
  /** Keep at most this many output lines in memory. */
  maxLines?: number;
  /** Echo the child's output to this process's stderr (debugging). */
  echo?: boolean;
  /**
   * Run in a process group of its own, as a terminal runs a command: signals (`kill`, `stop`, dispose) go to
   * the whole group, so a script and everything it started get them, exactly as with Ctrl-C.
   */
  detached?: boolean;
  /** Count the process as ended on `exit` (default) or once its output streams closed too (`close`). */
  exitOn?: 'exit' | 'close';
  /** What dispose does to a process still running: send `signal`, then SIGKILL after `graceMs` (default: SIGKILL). */
  dispose?: { signal: NodeJS.Signals; graceMs: number };
  /** Options for `node` itself, before the script (`spawnTs` only), e.g. `['--cpu-prof']`. */
  nodeArgs?: string[];
}

/** How a process ended. */
export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A child process with its output captured line by line. */
export interface ChildHandle extends AsyncDisposable {
  readonly child: ChildProcess;
  readonly pid: number;
  /** stdout and stderr lines, in arrival order. */
  readonly lines: string[];
  /** Resolves with the exit code (or the signal name) once the process has exited. */
  readonly exited: Promise<ExitInfo>;
  /** Resolves with the first line matching `pattern` (including lines already seen). */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  kill(signal?: NodeJS.Signals): void;
  /** Sends `signal` (default SIGTERM) and waits for exit; SIGKILLs after `timeoutMs`. */
  stop(
    signal?: NodeJS.Signals,
    timeoutMs?: number,
  ): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  output(): string;
}

/**
 * Children still running, each with how to kill it. A test that times out never reaches its `await using`
 * disposal (vitest moves on while the test function still awaits), so its children would outlive the test
 * process and keep ports, locks and subscriptions that later tests then trip over; they are SIGKILLed when this
 * process exits instead.
 */
const running = new Map<object, () => void>();
let exitHookInstalled = false;

function killRunningChildren(): void {
  for (const kill of running.values()) kill();
  running.clear();
}

function installExitHook(): void {
  if (exitHookInstalled) return;
  // 'exit' handlers run synchronously; process.kill is synchronous, so the signals are sent before it ends.
  process.once('exit', killRunningChildren);
  exitHookInstalled = true;
}

/**
 * Runs `kill` (synchronously) when this process exits, unless the returned function was called first — for
 * servers a test starts that are not its children (a daemonized `pg_ctl start`), so a test that times out or a
 * process that exits early does not leave them running.
 *
 * @example
 * ```ts
 * const forget = killOnExit(() => process.kill(pid, 'SIGQUIT'));
 * // … on a clean stop:
 * forget();
 * ```
 */
export function killOnExit(kill: () => void): () => void {
  installExitHook();
  const key = {};
  running.set(key, kill);
  return () => {
    running.delete(key);
  };
}

/**
 * Spawns `command` with its output captured; killed with SIGKILL on dispose if still running, and at the latest
 * when this process exits.
 */
export function spawnProcess(command: string, args: string[], options: SpawnOptions = {}): ChildHandle {
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: { ...process.env, ...options.env } as NodeJS.ProcessEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: options.detached === true,
  });
  installExitHook();
  const lines: string[] = [];
  const maxLines = options.maxLines ?? 20_000;
  const waiters = new Set<{ pattern: RegExp; resolve: (line: string) => void }>();
  let exitInfo: ExitInfo | null = null;
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('exit', () => running.delete(child));
    child.once(options.exitOn ?? 'exit', (code: number | null, signal: NodeJS.Signals | null) => {
      exitInfo = { code, signal };
      resolve(exitInfo);
    });
    child.on('error', (err) => {
      lines.push(`[spawn error] ${err.message}`);
      exitInfo = { code: -1, signal: null };
      resolve(exitInfo);
    });
  });
  const onData = (stream: NodeJS.ReadableStream) => {
    let buffer = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      buffer += chunk;
      let index = buffer.indexOf('\n');
      while (index >= 0) {
        const line = buffer.slice(0, index);
        buffer = buffer.slice(index + 1);
        if (options.echo) process.stderr.write(`[${child.pid}] ${line}\n`);
        lines.push(line);
        if (lines.length > maxLines) lines.splice(0, lines.length - maxLines);
        for (const waiter of waiters) {
          if (waiter.pattern.test(line)) {
            waiters.delete(waiter);
            waiter.resolve(line);
          }
        }
        index = buffer.indexOf('\n');
      }
    });
  };
  onData(child.stdout!);
  onData(child.stderr!);
  if (child.pid !== undefined) running.set(child, () => signal('SIGKILL'));
  const signal = (name: NodeJS.Signals) => {
    if (exitInfo !== null) return;
    if (!options.detached || child.pid === undefined) {
      child.kill(name);
      return;
    }
    try {
      process.kill(-child.pid, name);
    } catch {
      // the group is already gone
    }
  };

  const handle: ChildHandle = {
    child,
    pid: child.pid ?? -1,
    lines,
    exited,
    waitForLine(pattern, timeoutMs = 30_000) {
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
          reject(
            new Error(
              `Timed out after ${timeoutMs} ms waiting for ${pattern} from ${command}; output:\n${lines.slice(-40).join('\n')}`,
            ),
          );
        }, timeoutMs);
        waiters.add(waiter);
        void exited.then((info) => {
          if (!waiters.has(waiter)) return;
          waiters.delete(waiter);
          clearTimeout(timer);
          reject(
            new Error(
              `${command} exited (${info.code ?? info.signal}) before printing ${pattern}; output:\n${lines.slice(-40).join('\n')}`,
            ),
          );
        });
      });
    },
    kill(name = 'SIGTERM') {
      signal(name);
    },
    async stop(name = 'SIGTERM', timeoutMs = 10_000) {
      if (exitInfo !== null) return exitInfo;
      signal(name);
      const timer = setTimeout(() => signal('SIGKILL'), timeoutMs);
      const info = await exited;
      clearTimeout(timer);
      return info;
    },
    output: () => lines.join('\n'),
    async [Symbol.asyncDispose]() {
      if (exitInfo !== null) return;
      signal(options.dispose?.signal ?? 'SIGKILL');
      const timer = setTimeout(() => signal('SIGKILL'), options.dispose?.graceMs ?? 0);
      await exited;
      clearTimeout(timer);
    },
  };
  return handle;
}

const require = createRequire(import.meta.url);

/** Path of the tsx loader, so children can run TypeScript sources. */
export function tsxLoaderPath(): string {
  return join(dirname(require.resolve('tsx/package.json')), 'dist', 'loader.mjs');
}

/**
 * Spawns `node` on a TypeScript file with workspace packages resolved to their sources
 * (`--conditions=@sluice/source`), exactly as tests need for child processes.
 */
export function spawnTs(file: string, args: string[] = [], options: SpawnOptions = {}): ChildHandle {
  return spawnProcess(
    process.execPath,
    [...(options.nodeArgs ?? []), '--conditions=@sluice/source', '--import', tsxLoaderPath(), file, ...args],
    options,
  );
}

/** The capabilities that let root pass every file-permission check (`setpriv` names them without the `CAP_` prefix). */
const FILE_CAPABILITIES = ['dac_override', 'dac_read_search', 'fowner'];

/** Whether this process can run a child as root without {@link FILE_CAPABILITIES}: it is root, and has `setpriv`. */
function canDropFileCapabilities(): boolean {
  return process.getuid?.() === 0 && spawnSync('setpriv', ['--version']).status === 0;
}

/**
 * Spawns `command` as root without the capabilities that let root pass file-permission checks (`setpriv
 * --bounding-set`), so a file's or directory's own mode decides — as it does for a service user (chmod does not stop
 * root). Throws when this process is not root or `setpriv` (util-linux) is missing: such a test must not pass by
 * testing nothing.
 *
 * @example
 * ```ts
 * await chmod(dataDir, 0o555);
 * await using server = spawnWithoutFileCapabilities(process.execPath, ['dist/bin.js', '--config', file]);
 * expect((await server.exited).code).toBe(1);
 * ```
 */
export function spawnWithoutFileCapabilities(
  command: string,
  args: string[],
  options: SpawnOptions = {},
): ChildHandle {
  if (!canDropFileCapabilities())
    throw new Error(
      `a test drops root's file capabilities from ${command}: it needs to run as root, with setpriv (util-linux)`,
    );
  return spawnProcess(
    'setpriv',
    [`--bounding-set=${FILE_CAPABILITIES.map((c) => `-${c}`).join(',')}`, command, ...args],
    options,
  );
}

/** {@link spawnTs} without root's file capabilities (see {@link spawnWithoutFileCapabilities}). */
export function spawnTsWithoutFileCapabilities(
  file: string,
  args: string[] = [],
  options: SpawnOptions = {},
): ChildHandle {
  return spawnWithoutFileCapabilities(
    process.execPath,
    [...(options.nodeArgs ?? []), '--conditions=@sluice/source', '--import', tsxLoaderPath(), file, ...args],
    options,
  );
}
