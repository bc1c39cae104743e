/**
 * A consumer project outside the monorepo, as a user gets one from npm: `@sluice/client` and `@sluice/core` packed
 * with `pnpm pack` (what `pnpm publish` uploads, `workspace:` ranges rewritten) and unpacked into its
 * `node_modules`, beside the registry packages they depend on (linked from this workspace's store, so no network).
 * Tests compile programs there with the TypeScript compiler and run them with plain `node` — no workspace
 * resolution, no `@sluice/source` condition, no tsx.
 */
import { execFile } from 'node:child_process';
import { mkdir, readdir, symlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type TempDir, tempDir } from '@sluice/testkit';

const run = promisify(execFile);
const CLIENT_DIR = fileURLToPath(new URL('..', import.meta.url));
const CORE_DIR = fileURLToPath(new URL('../../core', import.meta.url));

/** A package directory as this workspace resolves it from `from` (a package's own directory). */
function packageDir(name: string, from: string): string {
  return dirname(createRequire(join(from, 'package.json')).resolve(`${name}/package.json`));
}

export interface PackedProject extends AsyncDisposable {
  readonly dir: string;
  /** Writes `files` (path → text) into the project. */
  write(files: Record<string, string>): Promise<void>;
  /** `tsc -p <tsconfig>` in the project: its exit code and output. */
  tsc(tsconfig: string): Promise<{ code: number; output: string }>;
  /** `node <args>` in the project: its exit code and output. */
  node(args: string[], timeoutMs?: number): Promise<{ code: number; output: string }>;
}

async function settle(promise: Promise<{ stdout: string; stderr: string }>) {
  try {
    const { stdout, stderr } = await promise;
    return { code: 0, output: `${stdout}${stderr}` };
  } catch (err) {
    const failed = err as { code?: number; stdout?: string; stderr?: string; message: string };
    return {
      code: typeof failed.code === 'number' ? failed.code : 1,
      output: `${failed.stdout ?? ''}${failed.stderr ?? ''}` || failed.message,
    };
  }
}

/**
 * Packs the client and core (their `dist` must be built: `pnpm build`) and sets up a project that depends on them,
 * with TypeScript and Node's types. A `"type": "module"` package.json at the root; put CommonJS code under a
 * directory with its own `{"type": "commonjs"}`.
 */
export async function packedProject(): Promise<PackedProject> {
  const dir: TempDir = await tempDir('sluice-client-user-');
  try {
    const tarballs = join(dir.path, 'tarballs');
    const modules = join(dir.path, 'node_modules');
    await mkdir(join(modules, '@sluice'), { recursive: true });
    await mkdir(join(modules, '@types'), { recursive: true });
    for (const [name, from] of [
      ['client', CLIENT_DIR],
      ['core', CORE_DIR],
    ] as const) {
      await run('pnpm', ['pack', '--pack-destination', tarballs], { cwd: from, timeout: 60_000 });
      const tarball = (await readdir(tarballs)).find((f) => f.startsWith(`sluice-${name}-`));
      if (tarball === undefined) throw new Error(`pnpm pack wrote no sluice-${name} tarball`);
      const into = join(modules, '@sluice', name);
      await mkdir(into);
      await run('tar', ['xzf', join(tarballs, tarball), '-C', into, '--strip-components=1']);
    }
    // What the registry would install beside them: core's dependencies, and the consumer's own dev tools.
    const links: Array<[string, string]> = [
      ['zod', packageDir('zod', CORE_DIR)],
      ['yaml', packageDir('yaml', CORE_DIR)],
      ['typescript', packageDir('typescript', CLIENT_DIR)],
      ['@types/node', packageDir('@types/node', CLIENT_DIR)],
    ];
    for (const [name, target] of links) await symlink(target, join(modules, name), 'dir');
    await writeFile(
      join(dir.path, 'package.json'),
      JSON.stringify({
        name: 'sluice-client-user',
        private: true,
        type: 'module',
        dependencies: { '@sluice/client': '0.1.0' },
      }),
    );
  } catch (err) {
    await dir[Symbol.asyncDispose]();
    throw err;
  }
  const tsc = join(dir.path, 'node_modules', 'typescript', 'bin', 'tsc');
  return {
    dir: dir.path,
    async write(files) {
      for (const [path, text] of Object.entries(files)) {
        await mkdir(dirname(join(dir.path, path)), { recursive: true });
        await writeFile(join(dir.path, path), text);
      }
    },
    tsc: (tsconfig) =>
      settle(run(process.execPath, [tsc, '-p', tsconfig], { cwd: dir.path, timeout: 120_000 })),
    node: (args, timeoutMs = 60_000) =>
      settle(run(process.execPath, args, { cwd: dir.path, timeout: timeoutMs })),
    [Symbol.asyncDispose]: () => dir[Symbol.asyncDispose](),
  };
}
