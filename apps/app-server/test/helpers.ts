import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createNatsBackplane } from '@sluice/backplane';
import type { SluiceEvent, SwitchOutcome } from '@sluice/core';
import {
  type ChildHandle,
  freePort,
  spawnProcess,
  spawnTs,
  spawnTsWithoutFileCapabilities,
  sql,
  tsxLoaderPath,
  waitFor,
} from '@sluice/testkit';

/** Every event published on a cluster's NATS, in arrival order, as an observer node hears it. */
export interface EventObserver extends AsyncDisposable {
  readonly events: SluiceEvent[];
}

/**
 * Joins the cluster `sluice` on `natsUrl` as node `observer` and records every event it hears (so a test can
 * assert on the AliasRedirected moves); unsubscribes and disconnects on dispose.
 */
export async function observeEvents(natsUrl: string): Promise<EventObserver> {
  const observer = await createNatsBackplane({ nats: natsUrl, clusterName: 'sluice', nodeId: 'observer' });
  const events: SluiceEvent[] = [];
  try {
    const subscription = await observer.subscribe((event) => {
      events.push(event);
    });
    return {
      events,
      async [Symbol.asyncDispose]() {
        await subscription[Symbol.asyncDispose]();
        await observer[Symbol.asyncDispose]();
      },
    };
  } catch (err) {
    await observer[Symbol.asyncDispose]();
    throw err;
  }
}

/** The CLI entry the tests run as real processes. */
export const BIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'bin.ts');

/** The api-server's CLI entry: tests run it beside an app-server, as a host does. */
export const API_BIN = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  'api-server',
  'src',
  'bin.ts',
);

/**
 * Runs the api-server of `node`'s host — same configuration file, same LMDB files — as a real process, resolved
 * once it listens; dispose it to stop it. `env`: `SLUICE_*` overrides of that file for the api-server only (say,
 * its own way to NATS).
 *
 * @example
 * ```ts
 * await using api = await startHostApiServer(node, { SLUICE_NATS_URL: nats.url });
 * ```
 */
export async function startHostApiServer(
  node: { spec: NodeSpec },
  env: Record<string, string> = {},
): Promise<ChildHandle> {
  const child = spawnTs(API_BIN, ['--config', join(node.spec.dir, 'sluice.yaml')], {
    cwd: node.spec.dir,
    env,
  });
  try {
    await child.waitForLine(/listening/i, 60_000);
  } catch (err) {
    await child[Symbol.asyncDispose]();
    throw err;
  }
  return child;
}

export interface NodeSpec {
  nodeId: string;
  /** Where the node keeps its config file and LMDB caches. */
  dir: string;
  store: string;
  nats?: string;
  roots: string[];
  port?: number;
  /** Extra top-level YAML (already formatted), e.g. endpoints. */
  extraYaml?: string;
  /** `transfers` keys over {@link FAST_TRANSFERS}. */
  transfers?: Record<string, number>;
  /**
   * The `pipeline` settings; default a commit every 50 records (many checkpoints for the tests that kill a run
   * half-way). A test that builds a large endpoint passes the product's defaults instead.
   */
  pipeline?: { commitEveryRecords: number; commitEveryMs: number };
  logLevel?: string;
  env?: Record<string, string>;
  /** Options for `node` itself (a benchmark passes `--cpu-prof`). */
  nodeArgs?: string[];
  /**
   * Run the process (as root) without the capabilities that let root pass file permission checks
   * (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, dropped from its bounding set by `setpriv`): a test
   * of what an app-server may not read or write needs the checks, and the process can still read the repository
   * (root owns it, whatever directory it was cloned into).
   */
  withoutFileCapabilities?: boolean;
  /**
   * Run the process under this file-size limit (`RLIMIT_FSIZE`, set by util-linux `prlimit`): a write that would
   * grow a file past it fails as on a full disk (LMDB sees a short write), while files already larger stay readable.
   */
  fileSizeLimitBytes?: number;
}

/**
 * The spec of a node that keeps everything under `root`: its config and caches in `root/node`, a SQLite store
 * there, and `root` as its only file root. Spread it and add the rest.
 *
 * @example
 * ```ts
 * await using node = await startNodeProcess({ ...localNode('h1', dir.path), extraYaml });
 * ```
 */
export function localNode(
  nodeId: string,
  root: string,
): Pick<NodeSpec, 'nodeId' | 'dir' | 'store' | 'roots'> {
  return {
    nodeId,
    dir: join(root, 'node'),
    store: `sqlite:${join(root, 'node', 'store.db')}`,
    roots: [root],
  };
}

/**
 * YAML lines for a control API that wants `token`, with old generations kept for an hour (so that a rollback
 * always finds its target within a test).
 */
export function tokenAndKeptGenerationsYaml(token: string): string[] {
  return [`control: { auth: { tokens: ["${token}"] } }`, 'cache: { gcGraceMs: 3600000 }'];
}

/** A running app-server process. */
export interface NodeProcess extends AsyncDisposable {
  readonly nodeId: string;
  readonly url: string;
  readonly port: number;
  readonly child: ChildHandle;
  readonly spec: NodeSpec;
}

/** Short timings so that leases expire and sweepers run within a test's patience. */
export const FAST_TRANSFERS = {
  leaseMs: 2_000,
  heartbeatMs: 300,
  ownerWaitMs: 500,
  sweepIntervalMs: 300,
  shutdownGraceMs: 5_000,
};

function yamlTransfers(transfers: Record<string, number>): string {
  return `transfers:\n${Object.entries(transfers)
    .map(([key, value]) => `  ${key}: ${value}`)
    .join('\n')}\n`;
}

/** Writes the node's YAML configuration and spawns `src/bin.ts --config <file>`; resolves once it is ready. */
export async function startNodeProcess(spec: NodeSpec): Promise<NodeProcess> {
  const port = spec.port ?? (await freePort());
  await mkdir(spec.dir, { recursive: true });
  const configFile = join(spec.dir, 'sluice.yaml');
  const lines = [
    `node: { id: ${spec.nodeId}, port: ${port}, advertisedUrl: "http://127.0.0.1:${port}" }`,
    `store: "${spec.store}"`,
    spec.nats ? `nats: "${spec.nats}"` : '',
    `dataDir: "${join(spec.dir, 'data')}"`,
    `files: { roots: [${spec.roots.map((r) => JSON.stringify(r)).join(', ')}] }`,
    `pipeline: ${JSON.stringify(spec.pipeline ?? { commitEveryRecords: 50, commitEveryMs: 5000 })}`,
    `logLevel: ${spec.logLevel ?? 'info'}`,
    yamlTransfers({ ...FAST_TRANSFERS, ...spec.transfers }),
    spec.extraYaml ?? '',
  ];
  await writeFile(configFile, lines.filter((l) => l !== '').join('\n'));
  const child =
    spec.fileSizeLimitBytes !== undefined
      ? spawnProcess(
          'prlimit',
          [
            `--fsize=${spec.fileSizeLimitBytes}`,
            '--',
            process.execPath,
            ...(spec.nodeArgs ?? []),
            '--conditions=@sluice/source',
            '--import',
            tsxLoaderPath(),
            BIN,
            '--config',
            configFile,
          ],
          { cwd: spec.dir, env: spec.env ?? {} },
        )
      : spec.withoutFileCapabilities !== true
        ? spawnTs(BIN, ['--config', configFile], {
            cwd: spec.dir,
            env: spec.env ?? {},
            nodeArgs: spec.nodeArgs ?? [],
          })
        : spawnTsWithoutFileCapabilities(BIN, ['--config', configFile], {
            cwd: spec.dir,
            env: spec.env ?? {},
            nodeArgs: spec.nodeArgs ?? [],
          });
  try {
    if ((spec.logLevel ?? 'info') === 'info') await child.waitForLine(/app-server ready/, 60_000);
    else
      await waitFor(
        async () => {
          if (child.child.exitCode !== null) throw new Error(`exited:\n${child.output()}`);
          return (await fetch(`http://127.0.0.1:${port}/healthz`)).ok;
        },
        { timeoutMs: 60_000, intervalMs: 100, what: `${spec.nodeId} to listen` },
      );
  } catch (err) {
    await child[Symbol.asyncDispose]();
    throw err;
  }
  return {
    nodeId: spec.nodeId,
    url: `http://127.0.0.1:${port}`,
    port,
    child,
    spec: { ...spec, port },
    [Symbol.asyncDispose]: () => child[Symbol.asyncDispose](),
  };
}

export interface HttpReply {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: test replies are asserted field by field
  body: any;
}

/** One HTTP call with a JSON body (or a raw string body with its own content type). */
export async function call(
  url: string,
  init: {
    method?: string;
    json?: unknown;
    raw?: string;
    contentType?: string;
    headers?: Record<string, string>;
  } = {},
): Promise<HttpReply> {
  const headers: Record<string, string> = { ...init.headers };
  let body: string | undefined;
  if (init.json !== undefined) {
    body = JSON.stringify(init.json);
    headers['content-type'] = init.contentType ?? 'application/json';
  } else if (init.raw !== undefined) {
    body = init.raw;
    if (init.contentType) headers['content-type'] = init.contentType;
  }
  const response = await fetch(url, {
    method: init.method ?? (body === undefined ? 'GET' : 'POST'),
    headers,
    body,
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = text === '' ? null : JSON.parse(text);
  } catch {}
  return { status: response.status, headers: response.headers, body: parsed };
}

/** The generation the app-server at `url` serves `items` from, once nothing is building (else null). */
export async function servingItems(url: string): Promise<string | null> {
  const reply = await call(`${url}/v1/endpoints`);
  const items = reply.body.endpoints?.find((e: { name: string }) => e.name === 'items');
  return items?.servingCache && items.buildingCache === null ? (items.servingCache as string) : null;
}

/**
 * Rebuilds `items` on the app-server at `url` once it has noticed its NATS is gone (the caller cut or stopped it),
 * and returns the generation it switched to from `from`: the switch of an outage.
 */
export async function rebuildWithoutBackplane(url: string, from: string): Promise<string> {
  await waitFor(async () => (await call(`${url}/readyz`)).body.backplane !== 'up', {
    timeoutMs: 15_000,
    what: 'the app-server to notice NATS is gone',
  });
  const rebuild = await call(`${url}/v1/endpoints/items/rebuild`, { method: 'POST' });
  if (rebuild.status !== 202)
    throw new Error(`rebuild answered ${rebuild.status}: ${JSON.stringify(rebuild.body)}`);
  return waitFor(
    async () => {
      const serving = await servingItems(url);
      return serving !== null && serving !== from ? serving : null;
    },
    { timeoutMs: 30_000, what: 'the switch to the rebuilt generation, with NATS unreachable' },
  );
}

/** Writes `count` JSONL records `{id, value, category}` and returns the path. */
export async function writeRecords(path: string, count: number): Promise<string> {
  await mkdir(dirname(path), { recursive: true });
  const lines: string[] = [];
  for (let i = 1; i <= count; i++)
    lines.push(JSON.stringify({ id: i, value: i * 1.5, category: i % 3 === 0 ? 'c' : 'a' }));
  await writeFile(path, `${lines.join('\n')}\n`);
  return path;
}

/** Reads a JSONL file and returns how many times each id appears. */
export async function idCounts(path: string): Promise<Map<number, number>> {
  const text = await readFile(path, 'utf8');
  const counts = new Map<number, number>();
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const id = (JSON.parse(line) as { id: number }).id;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

/** Asserts-ready summary: ids 1..count each exactly once (returns a description of what is wrong, or null). */
export async function exactlyOnce(path: string, count: number): Promise<string | null> {
  const counts = await idCounts(path);
  const problems: string[] = [];
  for (let i = 1; i <= count; i++) {
    const n = counts.get(i) ?? 0;
    if (n !== 1) problems.push(`id ${i} × ${n}`);
    if (problems.length > 10) break;
  }
  if (counts.size !== count) problems.push(`${counts.size} distinct ids, expected ${count}`);
  return problems.length === 0 ? null : problems.join(', ');
}

/** A transfer request body: JSONL file → JSONL file, optionally throttled. */
export function fileTransfer(id: string, source: string, destination: string, maxRecordsPerSecond?: number) {
  return {
    id,
    mode: 'idempotent',
    source: { type: 'file', path: source, format: 'jsonl' },
    destination: { type: 'file', path: destination, format: 'jsonl' },
    properties: { test: 'app-server' },
    options: maxRecordsPerSecond ? { maxRecordsPerSecond } : {},
  };
}

/** Polls the transfer until it reaches `state` on `url`. */
export async function waitForState(url: string, id: string, state: string, timeoutMs = 30_000) {
  return waitFor(
    async () => {
      const reply = await call(`${url}/v1/transfers/${id}`);
      return reply.status === 200 && reply.body.state === state ? reply.body : null;
    },
    { timeoutMs, intervalMs: 100, what: `transfer ${id} to become ${state}` },
  );
}

/** The answer of a promote or rollback that moved the alias of `items` from `from` to `to`. */
export function moved(cause: SwitchOutcome['cause'], from: string, to: string): SwitchOutcome {
  return { endpoint: 'items', from, to, cause, changed: true };
}

/**
 * Creates the `dst` table (id, value, category) of `url` — or `table` — with every committed physical write into it
 * counted in `<table>_writes` (a trigger), so a replayed or duplicated write shows; returns how to read the counts.
 * A second table in one database keeps its writes apart from the first's.
 *
 * @example
 * ```ts
 * const writes = await createCountedDestination(dst.url);
 * expect(await writes.counts()).toEqual({ n: 4_000, d: 4_000 }); // each record written once
 * ```
 */
export async function createCountedDestination(
  url: string,
  table = 'dst',
): Promise<{ counts(): Promise<{ n: number; d: number }> }> {
  if (!/^[a-z_][a-z0-9_]*$/.test(table)) throw new Error(`not a plain table name: ${table}`);
  await sql(url, `CREATE TABLE ${table} (id integer PRIMARY KEY, value double precision, category text)`);
  await sql(url, `CREATE TABLE ${table}_writes (id integer NOT NULL)`);
  await sql(
    url,
    `CREATE FUNCTION count_${table}_write() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN INSERT INTO ${table}_writes VALUES (NEW.id); RETURN NEW; END $$`,
  );
  await sql(
    url,
    `CREATE TRIGGER ${table}_counted AFTER INSERT OR UPDATE ON ${table} FOR EACH ROW EXECUTE FUNCTION count_${table}_write()`,
  );
  return {
    counts: async () =>
      (
        await sql<{ n: number; d: number }>(
          url,
          `SELECT count(*)::int AS n, count(DISTINCT id)::int AS d FROM ${table}_writes`,
        )
      )[0]!,
  };
}
