import { execFile } from 'node:child_process';
import { repoRoot } from './paths.js';

/** Runs `turbo run build` for the given workspace packages (cached by turbo after the first run). */
function turboBuild(packages: readonly string[], what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(
      'pnpm',
      ['turbo', 'run', 'build', ...packages.map((name) => `--filter=${name}`), '--output-logs=errors-only'],
      {
        cwd: repoRoot,
        env: { ...process.env, TURBO_TELEMETRY_DISABLED: '1' },
        maxBuffer: 64 * 1024 * 1024,
      },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`building ${what} failed: ${err.message}\n${stdout}\n${stderr}`));
        else resolve();
      },
    );
  });
}

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
  return turboBuild(['@sluice/app-server', '@sluice/api-server'], 'the apps');
}

/**
 * Builds the given workspace packages (and what they depend on) the way `pnpm release` does before it publishes,
 * so that what a test packs is the current `dist/`.
 *
 * @example
 * ```ts
 * beforeAll(() => buildPackages(['@sluice/core', '@sluice/client']), 900_000);
 * ```
 */
export function buildPackages(names: readonly string[]): Promise<void> {
  return turboBuild(names, names.join(', '));
}
