import { strictEqual } from 'node:assert';
import { rename, writeFile } from 'node:fs/promises';
import { Agent, request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { resolveConfig, type SwitchOutcome } from '@sluice/core';
import {
  type ChildHandle,
  freePort,
  type NatsServerHandle,
  spawnTs,
  startNatsServer,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { pino } from 'pino';
import YAML from 'yaml';
import { type ApiServer, startApiServer } from '../src/index.js';

export const API_BIN = fileURLToPath(new URL('../src/bin.ts', import.meta.url));
export const WRITER = fileURLToPath(new URL('./fixtures/writer.ts', import.meta.url));
/** The app-server's entry point: the e2e tests run the real one beside the api-servers. */
export const APP_SERVER_BIN = fileURLToPath(new URL('../../app-server/src/bin.ts', import.meta.url));

/**
 * Writes one generation of the `items` endpoint under `root` with the writer child process (rows `start` to
 * `start + count - 1`) and returns the generation's name; fails when the writer exits non-zero.
 */
export async function writeGeneration(root: string, start: number, count: number): Promise<string> {
  const child = spawnTs(WRITER, ['--root', root, '--count', String(count), '--start', String(start)]);
  const line = await child.waitForLine(/^GEN \d+ /, 60_000);
  strictEqual((await child.exited).code, 0, 'the writer exits 0');
  return line.split(' ')[2]!;
}

export interface SpawnedApiServer extends AsyncDisposable {
  readonly url: string;
  readonly child: ChildHandle;
}

/** Writes a sluice.yaml into `dir` and returns its path. */
export async function writeConfig(
  dir: string,
  config: Record<string, unknown>,
  file = 'sluice.yaml',
): Promise<string> {
  const path = join(dir, file);
  await writeFile(path, YAML.stringify(config));
  return path;
}

/**
 * Writes the sluice.yaml of the e2e tests' app-server into `dir`: node `h1` on `appPort`, a SQLite store, NATS at
 * `natsUrl`, and the one endpoint `items` materialized from the JSONL file `source`; `extra` sections are added or
 * replace the defaults (e.g. `cache`, `api`), `endpoint` keys are added to `items` (e.g. `switch`). Returns its path.
 */
export function writeItemsConfig(
  dir: string,
  options: {
    appPort: number;
    natsUrl: string;
    source: string;
    extra?: Record<string, unknown>;
    endpoint?: Record<string, unknown>;
  },
): Promise<string> {
  const { appPort, natsUrl, source } = options;
  return writeConfig(dir, {
    node: { id: 'h1', port: appPort, advertisedUrl: `http://127.0.0.1:${appPort}` },
    store: `sqlite:${join(dir, 'store.db')}`,
    nats: natsUrl,
    dataDir: join(dir, 'data'),
    files: { roots: [dir] },
    pipeline: { commitEveryRecords: 100, commitEveryMs: 200 },
    api: { reconcileMs: 2_000 },
    logLevel: 'info',
    ...options.extra,
    endpoints: [
      {
        name: 'items',
        source: { type: 'file', path: source, format: 'jsonl' },
        primaryKey: ['id'],
        fields: { id: 'integer', gen: 'integer', value: 'number', category: 'string' },
        indexes: [['value'], ['category', 'value']],
        ...options.endpoint,
      },
    ],
  });
}

/** Records per generation of the e2e tests' `items` source ({@link writeItemsSource}). */
export const ITEMS_COUNT_BY_GEN: Readonly<Record<number, number>> = { 1: 400, 2: 450, 3: 420 };

/**
 * Writes generation `gen` of the `items` source file atomically (write + rename), as an upstream export would:
 * ids 1..`countByGen[gen]` (default {@link ITEMS_COUNT_BY_GEN}), each record carrying its `gen`.
 */
export async function writeItemsSource(
  path: string,
  gen: number,
  countByGen: Readonly<Record<number, number>> = ITEMS_COUNT_BY_GEN,
): Promise<void> {
  const categories = ['a', 'b', 'c'];
  const lines: string[] = [];
  for (let id = 1; id <= countByGen[gen]!; id += 1)
    lines.push(JSON.stringify({ id, gen, value: id * gen, category: categories[id % 3] }));
  await writeFile(`${path}.tmp`, `${lines.join('\n')}\n`);
  await rename(`${path}.tmp`, path);
}

/**
 * Runs `sluice-app-server --config <path>` (working directory `cwd`, environment plus `env`) as a real child
 * process until it is ready.
 */
export async function spawnAppServer(
  configPath: string,
  cwd: string,
  env: Record<string, string> = {},
): Promise<ChildHandle> {
  const child = spawnTs(APP_SERVER_BIN, ['--config', configPath], { cwd, env });
  try {
    await child.waitForLine(/app-server ready/, 60_000);
  } catch (err) {
    await child[Symbol.asyncDispose]();
    throw err;
  }
  return child;
}

/** Runs `sluice-api-server --config <path>` as a real child process and waits until it listens. */
export async function spawnApiServer(
  configPath: string,
  env: Record<string, string> = {},
  /** Options for `node` itself (a benchmark passes `--cpu-prof`). */
  nodeArgs: string[] = [],
): Promise<SpawnedApiServer> {
  const port = await freePort();
  const child = spawnTs(API_BIN, ['--config', configPath], {
    env: { SLUICE_API_PORT: String(port), ...env },
    nodeArgs,
  });
  try {
    await child.waitForLine(/api-server listening/, 60_000);
  } catch (err) {
    await child[Symbol.asyncDispose]();
    throw err;
  }
  return {
    url: `http://127.0.0.1:${port}`,
    child,
    [Symbol.asyncDispose]: async () => {
      await child.stop('SIGTERM', 10_000);
    },
  };
}

export interface LoadSample {
  kind: 'lookup' | 'query' | 'count';
  cache: string | null;
  /** `gen` of every record of the body (one for a lookup, many for a query). */
  gens: number[];
  count?: number;
}

export interface LoadStats {
  requests: number;
  /** Requests sent and not yet answered, right now. */
  inFlight: number;
  durationMs: number;
  rate: number;
  failures: Array<{ status: number; body: string; url: string }>;
  /** Successful responses, checked by {@link verifyGenerations} once the load stops. */
  samples: LoadSample[];
  /** Responses whose records were not all from the generation their `sluice-cache` header names. */
  mixed: Array<{ cache: string | null; gens: number[]; count?: number; why: string }>;
  byCache: Map<string, number>;
  /** The generation each answering cache held, as observed. */
  genByCache: Map<string, number>;
}

/**
 * Checks every successful response: all records of one response carry the same `gen`; every response from
 * one cache carries the same `gen` (the one `genOf` says when given); a count equals `countOf(gen)`.
 */
export function verifyGenerations(
  samples: LoadSample[],
  options: { genOf?: (cache: string) => number | undefined; countOf: (gen: number) => number },
): { mixed: LoadStats['mixed']; genByCache: Map<string, number> } {
  const mixed: LoadStats['mixed'] = [];
  const genByCache = new Map<string, number>();
  for (const sample of samples) {
    if (sample.kind === 'count') continue;
    if (!sample.cache) {
      mixed.push({ ...sample, why: 'no sluice-cache header' });
      continue;
    }
    if (sample.gens.length === 0) {
      mixed.push({ ...sample, why: 'no records' });
      continue;
    }
    const first = sample.gens[0]!;
    if (sample.gens.some((g) => g !== first)) {
      mixed.push({ ...sample, why: 'records of several generations in one response' });
      continue;
    }
    const expected = options.genOf?.(sample.cache) ?? genByCache.get(sample.cache);
    if (expected !== undefined && expected !== first) {
      mixed.push({ ...sample, why: `cache holds generation ${expected}` });
      continue;
    }
    genByCache.set(sample.cache, first);
  }
  for (const sample of samples) {
    if (sample.kind !== 'count') continue;
    const gen = sample.cache ? (options.genOf?.(sample.cache) ?? genByCache.get(sample.cache)) : undefined;
    if (gen === undefined) mixed.push({ ...sample, why: 'count from a cache of unknown generation' });
    else if (sample.count !== options.countOf(gen))
      mixed.push({ ...sample, why: `count of generation ${gen} is ${options.countOf(gen)}` });
  }
  return { mixed, genByCache };
}

/**
 * Continuous load from `concurrency` concurrent clients on lookups, queries and counts against `urls`, until
 * stopped; then every response is checked with {@link verifyGenerations}.
 */
export function startLoad(options: {
  urls: string[];
  concurrency: number;
  endpoint: string;
  /** Lookups use ids 1..ids (present in every generation). */
  ids: number;
  genOf?: (cache: string) => number | undefined;
  countOf: (gen: number) => number;
}): {
  stop(): Promise<LoadStats>;
  /** Keeps the load up for `more` further requests (after a switch: proof that it cost nothing), then stops it. */
  stopAfter(more: number, wait: { timeoutMs: number; what: string }): Promise<LoadStats>;
  stats: LoadStats;
} {
  const stats: LoadStats = {
    requests: 0,
    inFlight: 0,
    durationMs: 0,
    rate: 0,
    failures: [],
    samples: [],
    mixed: [],
    byCache: new Map(),
    genByCache: new Map(),
  };
  let running = true;
  const started = Date.now();
  const agent = new Agent({ keepAlive: true, maxSockets: options.concurrency });
  const one = async (i: number): Promise<void> => {
    const base = options.urls[i % options.urls.length]!;
    // Mostly lookups, as a serving API sees; every fourth request a query, every tenth a count.
    const kind = i % 10 === 9 ? 2 : i % 4 === 3 ? 1 : 0;
    const id = 1 + ((i * 7919) % options.ids);
    let url: string;
    let payload: string | undefined;
    if (kind === 0) url = `${base}/v1/endpoints/${options.endpoint}/records/${id}`;
    else if (kind === 1) {
      url = `${base}/v1/endpoints/${options.endpoint}/query`;
      payload = JSON.stringify({ $filter: { category: 'a' }, $order_by: { value: 'asc' }, $limit: 20 });
    } else {
      url = `${base}/v1/endpoints/${options.endpoint}/count`;
      payload = JSON.stringify({ $filter: { value: { $gte: 0 } } });
    }
    stats.inFlight += 1;
    const response = await send(agent, url, payload).finally(() => {
      stats.inFlight -= 1;
    });
    const text = response.body;
    stats.requests += 1;
    if (response.status < 200 || response.status >= 300) {
      stats.failures.push({ status: response.status, body: text.slice(0, 500), url });
      return;
    }
    const cache = response.cache;
    if (cache) stats.byCache.set(cache, (stats.byCache.get(cache) ?? 0) + 1);
    const body = JSON.parse(text) as Record<string, unknown>;
    if (kind === 0) stats.samples.push({ kind: 'lookup', cache, gens: [body.gen as number] });
    else if (kind === 1)
      stats.samples.push({
        kind: 'query',
        cache,
        gens: (body.records as Array<{ gen: number }>).map((r) => r.gen),
      });
    else stats.samples.push({ kind: 'count', cache, gens: [], count: body.count as number });
  };
  const workers = Array.from({ length: options.concurrency }, async (_, w) => {
    let i = w;
    while (running) {
      try {
        await one(i);
      } catch (err) {
        stats.requests += 1;
        stats.failures.push({ status: 0, body: String(err), url: options.urls.join(',') });
      }
      i += options.concurrency;
    }
  });
  const stop = async (): Promise<LoadStats> => {
    running = false;
    await Promise.all(workers);
    agent.destroy();
    stats.durationMs = Date.now() - started;
    stats.rate = (stats.requests * 1000) / stats.durationMs;
    const verified = verifyGenerations(stats.samples, options);
    stats.mixed = verified.mixed;
    stats.genByCache = verified.genByCache;
    return stats;
  };
  return {
    stats,
    stop,
    async stopAfter(more, wait) {
      const before = stats.requests;
      await waitFor(() => stats.requests > before + more, wait);
      return stop();
    },
  };
}

/** One HTTP request on a keep-alive agent (lighter than fetch, so the load generator is not the bottleneck). */
function send(
  agent: Agent,
  url: string,
  body?: string,
): Promise<{ status: number; cache: string | null; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        agent,
        method: body === undefined ? 'GET' : 'POST',
        headers:
          body === undefined
            ? {}
            : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const header = res.headers['sluice-cache'];
          resolve({
            status: res.statusCode ?? 0,
            cache: typeof header === 'string' ? header : null,
            body: Buffer.concat(chunks).toString('utf8'),
          });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** GETs a record and returns the cache that answered. */
export async function answeringCache(base: string, endpoint = 'items', id = 1): Promise<string | null> {
  const response = await fetch(`${base}/v1/endpoints/${endpoint}/records/${id}`);
  await response.arrayBuffer();
  return response.status === 200 ? response.headers.get('sluice-cache') : null;
}

/** Sum of `sluice_api_switches_total` for `endpoint` over every reason, from a /metrics text. */
export function switchesOf(metrics: string, endpoint: string): number {
  let total = 0;
  const pattern = new RegExp(
    `^sluice_api_switches_total\\{endpoint="${endpoint}",reason="[a-z]+"\\} (\\d+)$`,
    'gm',
  );
  for (const match of metrics.matchAll(pattern)) total += Number(match[1]);
  return total;
}

/** The answer of a promote or rollback that moved the alias of `items` from `from` to `to`. */
export function moved(cause: SwitchOutcome['cause'], from: string, to: string): SwitchOutcome {
  return { endpoint: 'items', from, to, cause, changed: true };
}

// biome-ignore lint/suspicious/noExplicitAny: response bodies of several shapes, asserted field by field
type Json = any;

/** Fetches `url` and parses the body as JSON (null when empty). */
export async function fetchJson(
  url: string,
  init?: RequestInit,
): Promise<{ status: number; headers: Headers; body: Json }> {
  const response = await fetch(url, init);
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : null };
}

/** Whether every api-server of `urls` answers a lookup from `cache`. */
export async function allAnswerFrom(urls: string[], cache: string): Promise<boolean> {
  return (await Promise.all(urls.map((u) => answeringCache(u)))).every((c) => c === cache);
}

/**
 * Milliseconds from a redirect until every api-server of `urls` answers from the new generation. `build` builds
 * it and calls `onBuilt` right before the alias moves and the event goes out (as `buildGeneration` does): the
 * clock starts there.
 *
 * @example
 * ```ts
 * const ms = await timeSwitch((onBuilt) => buildGeneration(manager, 'items', 2, 200, nats, onBuilt), urls, {
 *   timeoutMs: 10_000,
 *   what: 'both api-servers on generation 2',
 * });
 * ```
 */
export async function timeSwitch(
  build: (onBuilt: (name: string) => void) => Promise<unknown>,
  urls: string[],
  wait: { timeoutMs: number; intervalMs?: number; what: string },
): Promise<number> {
  let green = '';
  let redirectedAt = 0;
  await build((name) => {
    green = name;
    redirectedAt = performance.now();
  });
  await waitFor(() => allAnswerFrom(urls, green), wait);
  return performance.now() - redirectedAt;
}

/** `sluice_api_switches_total{endpoint, reason="event"}` from a /metrics text. */
export function eventSwitchesOf(metrics: string, endpoint: string): number {
  const match = new RegExp(
    `^sluice_api_switches_total\\{endpoint="${endpoint}",reason="event"\\} (\\d+)$`,
    'm',
  ).exec(metrics);
  return match ? Number(match[1]) : 0;
}

/** Switches of `endpoint` for any reason but the event (reconcile, watch), from a /metrics text. */
export function otherSwitchesOf(metrics: string, endpoint: string): number {
  return switchesOf(metrics, endpoint) - eventSwitchesOf(metrics, endpoint);
}

/**
 * An api-server in this process on a free port, serving the caches under `dataDir`, silent, watching every 50 ms;
 * `config` adds sections to its configuration (e.g. `{ cache: { scanCap: 20 } }`).
 */
export function startQuietApiServer(
  dataDir: string,
  config: Record<string, unknown> = {},
): Promise<ApiServer> {
  return startApiServer({
    config: resolveConfig({ ...config, dataDir, logLevel: 'silent' }),
    dataDir,
    port: 0,
    host: '127.0.0.1',
    logger: pino({ level: 'silent' }),
    watchMs: 50,
  });
}

/** The app-server's view of the `items` endpoint (an entry of its `GET /v1/endpoints`). */
export interface ItemsStatus {
  servingCache: string;
  buildingCache: string | null;
  records: number;
  building?: { records: number } | null;
  [key: string]: unknown;
}

/**
 * One host of the e2e tests: a private nats-server, a temporary directory with the `items` source file (generation
 * 1), and a real app-server materializing it; api-servers started through it are stopped with it.
 */
export interface ItemsHost extends AsyncDisposable {
  readonly nats: NatsServerHandle;
  readonly dir: string;
  /** The JSONL file the endpoint reads. */
  readonly source: string;
  /** The host's sluice.yaml (app-server and api-servers). */
  readonly config: string;
  readonly appUrl: string;
  /** The app-server's process (its pid, to read what it holds under /proc; its output). */
  readonly app: ChildHandle;
  /** Writes generation `gen` of the source file (the host's record counts per generation). */
  writeSource(gen: number): Promise<void>;
  /** The app-server's view of `items`. */
  status(): Promise<ItemsStatus>;
  /** Starts `count` api-servers on the host's configuration. */
  startApiServers(count: number): Promise<SpawnedApiServer[]>;
}

/**
 * Starts an {@link ItemsHost}: `countByGen` sizes the source per generation (default {@link ITEMS_COUNT_BY_GEN}),
 * `extra` adds sections to the configuration (e.g. `cache`, or `api` to override the reconcile period), `endpoint`
 * keys to the `items` endpoint (e.g. `switch`).
 *
 * @example
 * ```ts
 * await using host = await startItemsHost('sluice-api-e2e-');
 * const [a, b] = await host.startApiServers(2);
 * ```
 */
export async function startItemsHost(
  prefix: string,
  options: {
    countByGen?: Readonly<Record<number, number>>;
    extra?: Record<string, unknown>;
    endpoint?: Record<string, unknown>;
    /** Environment variables added for the app-server and every api-server (e.g. `NODE_OPTIONS`). */
    env?: Record<string, string>;
  } = {},
): Promise<ItemsHost> {
  const countByGen = options.countByGen ?? ITEMS_COUNT_BY_GEN;
  const nats = await startNatsServer();
  const dir = await tempDir(prefix);
  const servers: SpawnedApiServer[] = [];
  let app: ChildHandle | undefined;
  const dispose = async () => {
    await Promise.allSettled(servers.map((server) => server[Symbol.asyncDispose]()));
    await app?.[Symbol.asyncDispose]();
    await dir[Symbol.asyncDispose]();
    await nats[Symbol.asyncDispose]();
  };
  try {
    const source = join(dir.path, 'items.jsonl');
    await writeItemsSource(source, 1, countByGen);
    const appPort = await freePort();
    const config = await writeItemsConfig(dir.path, {
      appPort,
      natsUrl: nats.url,
      source,
      ...(options.extra ? { extra: options.extra } : {}),
      ...(options.endpoint ? { endpoint: options.endpoint } : {}),
    });
    app = await spawnAppServer(config, dir.path, options.env);
    const appUrl = `http://127.0.0.1:${appPort}`;
    const appChild = app;
    return {
      nats,
      dir: dir.path,
      source,
      config,
      appUrl,
      app: appChild,
      writeSource: (gen) => writeItemsSource(source, gen, countByGen),
      status: async () =>
        (await fetchJson(`${appUrl}/v1/endpoints`)).body.endpoints.find(
          (e: { name: string }) => e.name === 'items',
        ) as ItemsStatus,
      startApiServers: async (count) => {
        const started = await Promise.all(
          Array.from({ length: count }, () => spawnApiServer(config, options.env)),
        );
        servers.push(...started);
        return started;
      },
      [Symbol.asyncDispose]: dispose,
    };
  } catch (err) {
    await dispose();
    throw err;
  }
}
