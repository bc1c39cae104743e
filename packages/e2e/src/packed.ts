import { readdirSync, readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { repoRoot } from './paths.js';
import { runScript } from './shell.js';

/** A workspace package that `pnpm release` publishes (its manifest has no `private: true`). */
export interface PublishedPackage {
  /** e.g. `@sluice/core`. */
  name: string;
  /** Its folder in the workspace. */
  dir: string;
}

/**
 * The packages `changeset publish` would publish: every workspace package (`packages/*`, `apps/*`) not marked
 * private, so that a new public package is covered without editing a list.
 *
 * @example
 * ```ts
 * const names = publishedPackages().map((p) => p.name); // ['@sluice/backplane', …]
 * ```
 */
export function publishedPackages(): PublishedPackage[] {
  const out: PublishedPackage[] = [];
  for (const group of ['packages', 'apps']) {
    for (const entry of readdirSync(join(repoRoot, group), { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const dir = join(repoRoot, group, entry.name);
      let manifest: { name: string; private?: boolean };
      try {
        manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
      } catch {
        continue; // not a package
      }
      if (manifest.private !== true) out.push({ name: manifest.name, dir });
    }
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

async function run(file: string, args: string[], cwd: string, timeoutMs: number): Promise<string> {
  const result = await runScript(file, args, { cwd, timeoutMs });
  if (result.code !== 0)
    throw new Error(
      `\`${file} ${args.join(' ')}\` exited ${result.code}:\n${result.stdout}\n${result.stderr}`,
    );
  return result.stdout;
}

/**
 * `pnpm pack` of each package into `destination`, exactly what `changeset publish` uploads (pnpm rewrites the
 * `workspace:` ranges there). Returns package name → tarball path.
 *
 * @example
 * ```ts
 * const tarballs = await packPackages(publishedPackages(), dir.path);
 * ```
 */
export async function packPackages(
  packages: readonly PublishedPackage[],
  destination: string,
): Promise<Map<string, string>> {
  const tarballs = new Map<string, string>();
  for (const pkg of packages) {
    const before = new Set(readdirSync(destination));
    await run('pnpm', ['pack', '--pack-destination', destination], pkg.dir, 120_000);
    const made = readdirSync(destination).filter((f) => f.endsWith('.tgz') && !before.has(f));
    if (made.length !== 1) throw new Error(`pnpm pack of ${pkg.name} made ${made.length} tarballs`);
    tarballs.set(pkg.name, join(destination, made[0]!));
  }
  return tarballs;
}

/**
 * A fresh npm project in `dir` (as `npm init -y` makes) with the tarballs installed together — so the packages'
 * dependencies on each other resolve to the tarballs and everything else comes from the npm registry, as for a
 * user — plus `extra` registry packages (e.g. the user's own `@types/node`).
 *
 * @example
 * ```ts
 * await installTarballs(consumer, [...tarballs.values()], ['@types/node@^20']);
 * ```
 */
export async function installTarballs(
  dir: string,
  tarballs: readonly string[],
  extra: readonly string[] = [],
): Promise<void> {
  await writeFile(
    join(dir, 'package.json'),
    `${JSON.stringify({ name: 'consumer', version: '1.0.0', private: true }, null, 2)}\n`,
  );
  await run(
    'npm',
    ['install', '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error', ...tarballs, ...extra],
    dir,
    600_000,
  );
}
