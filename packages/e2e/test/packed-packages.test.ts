import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { isBuiltin } from 'node:module';
import { join, relative } from 'node:path';
import {
  type LogicalPostgresHandle,
  sql,
  startLogicalPostgres,
  type TempDir,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildPackages } from '../src/build.js';
import { installTarballs, packPackages, publishedPackages } from '../src/packed.js';
import { repoRoot } from '../src/paths.js';
import { runScript } from '../src/shell.js';

// Each public package as a user gets it: `pnpm pack` (what `changeset publish` uploads), then `npm install` of the
// tarballs in a fresh project outside the workspace — no `workspace:` links, no hoisted workspace dependencies, no
// `@sluice/source` condition, no tsx. Everything below runs in that project, in plain node or plain tsc.

/** The documented entry points of each package: a named export its README starts with. */
const ENTRY_POINTS: Record<string, string[]> = {
  '@sluice/backplane': ['createNatsBackplane', 'createDirectBackplane'],
  '@sluice/cache': ['openCacheManager', 'schemaHash'],
  '@sluice/client': ['createClient', 'SluiceClientError'],
  '@sluice/core': ['parseTransferRequest', 'toProblem', 'SluiceError'],
  '@sluice/pipeline': ['runTransfer', 'startEndpointPipeline'],
  '@sluice/store': ['openStore', 'SqlDataPlaneStore'],
};

/**
 * Subpath entries, imported at run time like the packages. Not type-checked here: `@sluice/backplane/fastify`'s
 * declarations import fastify, which a process mounting the plugin has and this consumer project does not.
 */
const SUBPATH_ENTRY_POINTS: Record<string, string[]> = {
  '@sluice/backplane/fastify': ['directRoutes'],
};

const TSC = join(repoRoot, 'node_modules/typescript/bin/tsc');
/** Two tsc runs (node16, bundler) over every package's declarations, on a busy 2-core machine. */
const TSC_MS = 240_000;
/** The user's own Node types, the same major as the workspace's. */
const NODE_TYPES = `@types/node@^${JSON.parse(readFileSync(join(repoRoot, 'node_modules/@types/node/package.json'), 'utf8')).version.split('.')[0]}`;

interface Manifest {
  name: string;
  private?: boolean;
  license?: string;
  repository?: { url?: string };
  engines?: { node?: string };
  main?: string;
  types?: string;
  bin?: Record<string, string>;
  exports?: Record<string, unknown>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

let work: TempDir;
/** The consumer project: the tarballs installed from npm's point of view. */
let consumer: string;

function installed(name: string): string {
  return join(consumer, 'node_modules', name);
}

function manifestOf(name: string): Manifest {
  return JSON.parse(readFileSync(join(installed(name), 'package.json'), 'utf8')) as Manifest;
}

function node(args: string[]) {
  return runScript(process.execPath, args, { cwd: consumer, timeoutMs: 60_000 });
}

/** Every file path under `dir` (relative), for the files a package ships. */
function filesUnder(dir: string, base = dir): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name), base) : [relative(base, join(dir, e.name))],
  );
}

/** The package a bare specifier names (`pg/lib/x` → `pg`, `@nats-io/kv/x` → `@nats-io/kv`). */
function packageOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
}

/** The bare module specifiers a built JavaScript file imports or requires (statically or dynamically). */
function bareImports(code: string): Set<string> {
  const found = new Set<string>();
  const patterns = [
    /^\s*(?:import|export)\s[^'"]*?\sfrom\s*['"]([^'"]+)['"]/gm,
    /^\s*import\s*['"]([^'"]+)['"]/gm,
    /\b(?:require|import)\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  for (const pattern of patterns)
    for (const match of code.matchAll(pattern)) {
      const specifier = match[1]!;
      if (specifier.startsWith('.') || specifier.startsWith('/') || isBuiltin(specifier)) continue;
      found.add(packageOf(specifier));
    }
  return found;
}

/** `tsc -p dir` in the consumer project: its diagnostics, one line each, paths relative to the project. */
async function tscDiagnostics(dir: string): Promise<string[]> {
  const result = await runScript(process.execPath, [TSC, '-p', dir], { cwd: consumer, timeoutMs: 120_000 });
  return `${result.stdout}\n${result.stderr}`
    .split('\n')
    .filter((line) => /error TS\d+/.test(line))
    .map((line) => line.replace(`${consumer}/`, ''));
}

type Resolution = 'node16' | 'bundler';
const typechecks = new Map<Resolution, Promise<string[]>>();

/**
 * `tsc --noEmit` in the consumer project, `strict` and with the libraries' declarations checked too (no
 * `skipLibCheck`: with it, a declaration naming a module without types silently turns into `any`). node16 checks
 * both the ESM (`.mts`) and CommonJS (`.cts`) declarations. Returns the diagnostics, one line each.
 */
function typecheck(resolution: Resolution): Promise<string[]> {
  let pending = typechecks.get(resolution);
  if (pending === undefined) {
    pending = (async () => {
      const dir = join(consumer, `tsc-${resolution}`);
      await mkdir(dir, { recursive: true });
      const imports = Object.keys(ENTRY_POINTS)
        .map((name, i) => `import * as p${i} from '${name}';\nexport type P${i} = typeof p${i};\n`)
        .join('');
      const files = resolution === 'node16' ? ['use.mts', 'use.cts'] : ['use.ts'];
      for (const file of files) await writeFile(join(dir, file), imports);
      await writeFile(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            strict: true,
            noEmit: true,
            target: 'es2022',
            module: resolution === 'node16' ? 'node16' : 'esnext',
            moduleResolution: resolution,
            skipLibCheck: false,
            types: ['node'],
          },
          files,
        }),
      );
      return tscDiagnostics(dir);
    })();
    typechecks.set(resolution, pending);
  }
  return pending;
}

/**
 * The diagnostics reported in one installed package's own files (its declarations). Third-party declarations are
 * theirs to fix: lmdb 3.5.6's `index.d.ts` ends in `export =` in an ESM package (TS1203 under `bundler`), whatever
 * imports it.
 */
async function diagnosticsIn(name: string, resolution: Resolution): Promise<string[]> {
  const all = await typecheck(resolution);
  return all.filter((line) => line.includes(`node_modules/${name}/`));
}

describe('the published packages, packed and installed from npm as a user installs them', () => {
  beforeAll(async () => {
    const packages = publishedPackages();
    await buildPackages(packages.map((p) => p.name));
    work = await tempDir('sluice-e2e-packed-');
    const tarballDir = join(work.path, 'tarballs');
    consumer = join(work.path, 'consumer');
    await mkdir(tarballDir);
    await mkdir(consumer);
    const tarballs = await packPackages(packages, tarballDir);
    await installTarballs(consumer, [...tarballs.values()], [NODE_TYPES]);
  }, 900_000);

  afterAll(async () => {
    await work?.remove();
  });

  it('publishes exactly the six libraries (the apps and test support stay private)', () => {
    expect(publishedPackages().map((p) => p.name)).toEqual(Object.keys(ENTRY_POINTS));
  });

  it('ships complete manifests: no workspace ranges, engines, license, repository, entry files present', () => {
    for (const name of Object.keys(ENTRY_POINTS)) {
      const manifest = manifestOf(name);
      const text = readFileSync(join(installed(name), 'package.json'), 'utf8');
      expect(text, name).not.toContain('workspace:');
      expect(manifest.engines?.node, name).toBe('>=20');
      expect(manifest.license, name).toBe('Apache-2.0');
      expect(manifest.repository?.url, name).toMatch(/^git\+https:\/\//);
      const shipped = new Set(filesUnder(installed(name)));
      expect(shipped.has('README.md') && shipped.has('LICENSE'), name).toBe(true);
      // Every file the manifest points at is in the tarball.
      const targets = [manifest.main, manifest.types, ...Object.values(manifest.bin ?? {})];
      const walk = (value: unknown): void => {
        if (typeof value === 'string') targets.push(value);
        else if (value && typeof value === 'object') Object.values(value).forEach(walk);
      };
      walk(manifest.exports);
      for (const target of targets)
        if (target !== undefined)
          expect(shipped.has(target.replace(/^\.\//, '')), `${name}: ${target}`).toBe(true);
      // No tests: they import test support that is never published.
      expect(
        [...shipped].filter((f) => /\.test\.[cm]?[jt]s$/.test(f) || f.startsWith('test/')),
        name,
      ).toEqual([]);
    }
  });

  it('imports every package in plain node, as ESM and as CommonJS, with the same documented exports', async () => {
    for (const [name, expected] of Object.entries({ ...ENTRY_POINTS, ...SUBPATH_ENTRY_POINTS })) {
      const show =
        'JSON.stringify(Object.keys(m).filter((k) => k !== "default" && k !== "module.exports").sort())';
      const esm = await node([
        '--input-type=module',
        '-e',
        `const m = await import('${name}'); console.log(${show})`,
      ]);
      const cjs = await node(['-e', `const m = require('${name}'); console.log(${show})`]);
      expect(esm.code, `${name} ESM: ${esm.stderr}`).toBe(0);
      expect(cjs.code, `${name} CJS: ${cjs.stderr}`).toBe(0);
      const esmNames = JSON.parse(esm.stdout) as string[];
      expect(esmNames, name).toEqual(expect.arrayContaining(expected));
      expect(JSON.parse(cjs.stdout), name).toEqual(esmNames);
    }
  });

  it('imports at run time only what each package declares as a dependency', () => {
    for (const name of Object.keys(ENTRY_POINTS)) {
      const manifest = manifestOf(name);
      const declared = new Set([
        ...Object.keys(manifest.dependencies ?? {}),
        ...Object.keys(manifest.peerDependencies ?? {}),
      ]);
      const code = filesUnder(installed(name)).filter(
        (f) => /^dist\/.*\.(c?js|mjs)$/.test(f) || /^src\/.*\.mjs$/.test(f),
      );
      expect(code.length, name).toBeGreaterThan(0);
      for (const file of code) {
        const used = bareImports(readFileSync(join(installed(name), file), 'utf8'));
        expect(
          [...used].filter((pkg) => !declared.has(pkg)),
          `${name}/${file}`,
        ).toEqual([]);
      }
    }
  });

  it('runs the sluice-client bin', async () => {
    const help = await runScript('npx', ['--no-install', 'sluice-client', '--help'], {
      cwd: consumer,
      timeoutMs: 60_000,
    });
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/^Usage: sluice-client types --url <api-server URL>/);
  });

  it(
    'defect: @sluice/pipeline declarations import pg, whose types the package does not install',
    async () => {
      expect(await diagnosticsIn('@sluice/pipeline', 'node16')).toEqual([]);
      expect(await diagnosticsIn('@sluice/pipeline', 'bundler')).toEqual([]);
    },
    TSC_MS,
  );

  it(
    'defect: @sluice/backplane declarations import fastify, an optional peer a user of NATS does not install',
    async () => {
      expect(await diagnosticsIn('@sluice/backplane', 'node16')).toEqual([]);
      expect(await diagnosticsIn('@sluice/backplane', 'bundler')).toEqual([]);
    },
    TSC_MS,
  );

  // @sluice/client runs in browsers (its README), where a project has the DOM's types and not Node's: its
  // declarations, and the @sluice/core ones they import, must type-check without @types/node.
  it(
    'defect: @sluice/client type-checks in a browser project, which has no Node types',
    async () => {
      const dir = join(consumer, 'tsc-browser');
      await mkdir(dir, { recursive: true });
      await writeFile(
        join(dir, 'page.ts'),
        `import { createClient, SluiceClientError } from '@sluice/client';
type City = { id: number; name: string };
const cities = createClient({ queryUrl: 'https://api.example' }).endpoint<City>('cities');
export async function cityName(id: number): Promise<string | undefined> {
  try {
    return (await cities.get(id))?.name;
  } catch (err) {
    if (err instanceof SluiceClientError) return err.code;
    throw err;
  }
}
`,
      );
      await writeFile(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            strict: true,
            noEmit: true,
            target: 'es2022',
            module: 'esnext',
            moduleResolution: 'bundler',
            skipLibCheck: false,
            types: [], // the consumer project has @types/node installed: a browser project's types stop at the DOM
            lib: ['es2022', 'dom', 'dom.iterable', 'esnext.disposable'],
          },
          files: ['page.ts'],
        }),
      );
      expect(await tscDiagnostics(dir)).toEqual([]);
    },
    TSC_MS,
  );

  // The two packages above have a test of their own.
  it.each(['@sluice/cache', '@sluice/client', '@sluice/core', '@sluice/store'])(
    'type-checks %s strictly: its declarations and the code importing it',
    async (name) => {
      for (const resolution of ['node16', 'bundler'] as const) {
        expect(await diagnosticsIn(name, resolution), resolution).toEqual([]);
        const own = (await typecheck(resolution)).filter((line) => line.startsWith(`tsc-${resolution}/`));
        expect(own, resolution).toEqual([]);
      }
    },
    TSC_MS,
  );

  describe('with a PostgreSQL source', () => {
    let server: LogicalPostgresHandle;
    beforeAll(async () => {
      server = await startLogicalPostgres();
    }, 120_000);
    afterAll(async () => {
      await server?.[Symbol.asyncDispose]();
    });

    // The replication connection runs on a worker thread whose file (replication-worker.mjs) is loaded by path at
    // run time: it must be in the tarball and found from the installed package, from the ESM and the CJS build.
    it.each(['esm', 'cjs'] as const)(
      'streams a table into an endpoint through the replication worker of the installed package (%s)',
      async (format) => {
        const url = await server.createDatabase(`packed_${format}`);
        await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)');
        await sql(url, 'INSERT INTO items VALUES (1, 10)');
        const script = join(consumer, `replicate.${format === 'esm' ? 'mjs' : 'cjs'}`);
        const load =
          format === 'esm'
            ? `import { openCacheManager } from '@sluice/cache';\nimport { startEndpointPipeline } from '@sluice/pipeline';\n`
            : `const { openCacheManager } = require('@sluice/cache');\nconst { startEndpointPipeline } = require('@sluice/pipeline');\n`;
        await writeFile(
          script,
          `${load}
const [url, root, wanted] = process.argv.slice(2);
(async () => {
  const caches = await openCacheManager(root);
  const pipeline = await startEndpointPipeline(
    { name: 'items', source: { type: 'postgres', connection: 'db', table: 'items' }, primaryKey: ['id'],
      fields: { id: 'integer', v: 'integer' }, indexes: [] },
    { caches, events: { publish: async () => {} }, connections: { db: { type: 'postgres', url } }, nodeId: 'n1',
      commitEveryMs: 50, retryMs: 100, replication: { keepaliveMs: 200 } },
  );
  await pipeline.whenServing({ timeoutMs: 30000 });
  console.log('serving');
  let count = 0;
  for (let i = 0; i < 300 && count < Number(wanted); i++) {
    const cache = await caches.openRo('items');
    count = cache.count({});
    await cache.close();
    if (count < Number(wanted)) await new Promise((r) => setTimeout(r, 100));
  }
  console.log(JSON.stringify({ count, replication: pipeline.status().replication !== null, error: pipeline.status().error }));
  await pipeline.stop();
  await caches.close();
})();
`,
        );
        // The row inserted after start arrives over the replication stream, not the snapshot.
        const root = join(work.path, `caches-${format}`);
        const run = node([script, url, root, '2']);
        const inserter = (async () => {
          // Once the worker streams (its slot is active), so that the row cannot come with the snapshot.
          await waitFor(
            async () => {
              const rows = await sql<{ n: number }>(
                url,
                "SELECT count(*)::int AS n FROM pg_replication_slots WHERE active AND slot_name LIKE 'sluice_%'",
              );
              return rows[0]!.n > 0;
            },
            { timeoutMs: 60_000, what: 'the replication slot to be streamed from' },
          );
          await sql(url, 'INSERT INTO items VALUES (2, 20)');
        })();
        const [result] = await Promise.all([run, inserter]);
        expect(result.code, result.stderr).toBe(0);
        const last = result.stdout.trim().split('\n').at(-1)!;
        expect(JSON.parse(last)).toEqual({ count: 2, replication: true, error: null });
      },
      120_000,
    );
  });
});
