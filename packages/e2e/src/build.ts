import { execFile } from 'node:child_process';
import { repoRoot } from './paths.js';

/**
 * Builds the two apps the examples run (`dist/bin.js`), with the same turbo command `pnpm start` uses, so
 * a test's own timeouts do not have to cover a cold build. Cached by turbo after the first run.
 *
 * @example
 * ```ts
 * beforeAll(() => buildApps(), 900_000);
 * ```
 */
export function buildApps(): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(
      'pnpm',
      [
        'turbo',
        'run',
        'build',
        '--filter=@sluice/app-server',
        '--filter=@sluice/api-server',
        '--output-logs=errors-only',
      ],
      {
        cwd: repoRoot,
        env: { ...process.env, TURBO_TELEMETRY_DISABLED: '1' },
        maxBuffer: 64 * 1024 * 1024,
      },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`building the apps failed: ${err.message}\n${stdout}\n${stderr}`));
        else resolve();
      },
    );
  });
}
