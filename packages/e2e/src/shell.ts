import { execFile } from 'node:child_process';

/**
 * Runs one command line through `sh -c`, exactly as a user pastes it into a terminal, and returns its
 * stdout. Rejects (with stderr) on a non-zero exit.
 *
 * @example
 * ```ts
 * const body = JSON.parse(await sh("curl -s http://127.0.0.1:8080/v1/endpoints"));
 * ```
 */
export function sh(
  commandLine: string,
  options: { cwd?: string; env?: Record<string, string | undefined>; timeoutMs?: number } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      'sh',
      ['-c', commandLine],
      {
        cwd: options.cwd,
        env: { ...process.env, ...options.env } as NodeJS.ProcessEnv,
        timeout: options.timeoutMs ?? 60_000,
        maxBuffer: 64 * 1024 * 1024,
      },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`\`${commandLine}\` failed: ${err.message}\n${stdout}\n${stderr}`));
        else resolve(stdout);
      },
    );
  });
}

/** What a finished script printed and how it exited. */
export interface ScriptResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a script (e.g. an example's `run.sh start`) to completion and returns its exit code and output, whatever
 * the code (the caller asserts it).
 *
 * @example
 * ```ts
 * const started = await runScript('examples/cluster/run.sh', ['start'], { cwd: repoRoot, env });
 * expect(started.code, started.stderr).toBe(0);
 * ```
 */
export function runScript(
  file: string,
  args: string[],
  options: { cwd: string; env?: Record<string, string | undefined>; timeoutMs?: number },
): Promise<ScriptResult> {
  return new Promise((resolve) => {
    const child = execFile(
      file,
      args,
      {
        cwd: options.cwd,
        env: { ...process.env, ...options.env } as NodeJS.ProcessEnv,
        timeout: options.timeoutMs ?? 600_000,
        maxBuffer: 64 * 1024 * 1024,
      },
      (err, stdout, stderr) => {
        const failure = err as (Error & { code?: number | string; signal?: NodeJS.Signals }) | null;
        resolve({
          code: failure ? (typeof failure.code === 'number' ? failure.code : null) : 0,
          signal: failure?.signal ?? null,
          stdout,
          stderr: failure && typeof failure.code !== 'number' ? `${stderr}\n${failure.message}` : stderr,
        });
      },
    );
    child.stdin?.end();
  });
}
