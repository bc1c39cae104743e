import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CacheManager, openCacheManager, type RwCache } from '@sluice/cache';
import { type ChildHandle, freePort, spawnTs, waitFor } from '@sluice/testkit';

/** The real server entry points (run as child processes). */
export const API_BIN = fileURLToPath(new URL('../../../apps/api-server/src/bin.ts', import.meta.url));
export const APP_BIN = fileURLToPath(new URL('../../../apps/app-server/src/bin.ts', import.meta.url));

export const ITEMS = {
  fields: { id: 'integer', value: 'number', category: 'string' } as Record<
    string,
    'integer' | 'number' | 'string'
  >,
  primaryKey: ['id'],
  indexes: [['value'], ['category']],
};

export function item(id: number, gen = 1): { id: number; value: number; category: string } {
  return { id, value: id * gen, category: ['a', 'b', 'c'][id % 3]! };
}

/** This process writes the endpoint's generations, as the host's app-server would. */
export interface Writer extends AsyncDisposable {
  readonly root: string;
  readonly manager: CacheManager;
  cache: RwCache;
  /** Commits `ops`; with `lsn`, the checkpoint names it as a replication source's position (`items.source`). */
  commit(
    ops: Array<{ op: 'upsert'; record: Record<string, unknown> } | { op: 'delete'; key: unknown[] }>,
    lsn?: string,
  ): Promise<void>;
  rebuild(records: Record<string, unknown>[]): Promise<string>;
}

/**
 * Writes the `items` endpoint in this process. With `options.lsn`, its first commit (and every commit given an
 * `lsn`) carries a replication source's position, so the api-server answers `sluice-position` and waits for
 * `sluice-min-position`.
 */
export async function startWriter(
  root: string,
  records: Record<string, unknown>[],
  options: { lsn?: string } = {},
): Promise<Writer> {
  const manager = await openCacheManager(root, { gcGraceMs: 3_600_000 });
  let epoch = 0;
  const checkpoint = (lsn?: string) => ({
    dag: 'client-test',
    epoch: ++epoch,
    positions:
      lsn === undefined
        ? { src: epoch }
        : { 'items.source': { capture: 'replication', phase: 'stream', lsn } },
    at: new Date().toISOString(),
  });
  const build = async (rows: Record<string, unknown>[]) => {
    const cache = await manager.create({ endpoint: 'items', schema: ITEMS });
    cache.apply(rows.map((record) => ({ op: 'upsert' as const, record })));
    await cache.commit(checkpoint(options.lsn));
    await manager.redirect('items', cache.name);
    return cache;
  };
  const writer: Writer = {
    root,
    manager,
    cache: await build(records),
    async commit(ops, lsn) {
      writer.cache.apply(ops, { onConflict: 'overwrite' });
      await writer.cache.commit(checkpoint(lsn));
    },
    async rebuild(rows) {
      const old = writer.cache;
      writer.cache = await build(rows);
      await old.close();
      return writer.cache.name;
    },
    [Symbol.asyncDispose]: async () => {
      await writer.cache.close();
      await manager.close();
    },
  };
  return writer;
}

export interface Server extends AsyncDisposable {
  readonly url: string;
  readonly port: number;
  child: ChildHandle;
  /** SIGKILLs the process (connections drop as in a crash). */
  kill(): Promise<void>;
  /** Starts it again on the same port. */
  restart(): Promise<void>;
}

async function serve(
  bin: string,
  configFile: string,
  port: number,
  ready: RegExp,
  cwd: string,
): Promise<Server> {
  const start = async () => {
    const child = spawnTs(bin, ['--config', configFile], { cwd });
    try {
      await child.waitForLine(ready, 60_000);
    } catch (err) {
      await child[Symbol.asyncDispose]();
      throw err;
    }
    return child;
  };
  const server: Server = {
    url: `http://127.0.0.1:${port}`,
    port,
    child: await start(),
    async kill() {
      server.child.kill('SIGKILL');
      await server.child.exited;
    },
    async restart() {
      server.child = await start();
    },
    [Symbol.asyncDispose]: async () => {
      await server.child.stop('SIGTERM', 10_000);
    },
  };
  return server;
}

/** A real `sluice-api-server` process over `dataDir`. */
export async function startApi(
  dir: string,
  dataDir: string,
  extra: Record<string, unknown> = {},
): Promise<Server> {
  const port = await freePort();
  const configFile = join(dir, 'api.yaml');
  await writeFile(configFile, JSON.stringify({ dataDir, api: { port, ...extra } }));
  return serve(API_BIN, configFile, port, /api-server listening/, dir);
}

/** A real `sluice-app-server` process (SQLite store; no endpoints unless `extra` has some) for the control API. */
export async function startApp(
  dir: string,
  options: { port?: number; transfers?: Record<string, number>; extra?: Record<string, unknown> } = {},
): Promise<Server> {
  const port = options.port ?? (await freePort());
  await mkdir(join(dir, 'app'), { recursive: true });
  const configFile = join(dir, 'app', 'sluice.yaml');
  await writeFile(
    configFile,
    JSON.stringify({
      node: { id: 'client-test', port, advertisedUrl: `http://127.0.0.1:${port}` },
      store: `sqlite:${join(dir, 'app', 'store.db')}`,
      dataDir: join(dir, 'app', 'data'),
      files: { roots: [dir] },
      transfers: {
        leaseMs: 2_000,
        heartbeatMs: 300,
        ownerWaitMs: 500,
        sweepIntervalMs: 300,
        ...options.transfers,
      },
      ...options.extra,
    }),
  );
  return serve(APP_BIN, configFile, port, /app-server ready/, join(dir, 'app'));
}

export async function waitUntil<T>(check: () => T | Promise<T>, what: string, timeoutMs = 30_000) {
  return waitFor(check, { timeoutMs, intervalMs: 20, what });
}
