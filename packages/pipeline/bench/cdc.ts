/**
 * `pnpm --filter @sluice/pipeline bench cdc [changes] [lagSeconds]` (default 100000 changes, 10 s of lag).
 *
 * PostgreSQL change data capture, against a private PostgreSQL with `wal_level=logical` (testkit), all in this
 * run on this machine:
 *
 * 1. Throughput. The same WAL — `changes` row changes (60 % inserts, 30 % updates, 10 % deletes) in transactions
 *    of 500 — is read from two slots created before it was written: by the raw `pg-logical-replication` stream
 *    alone (pgoutput decoded, messages counted; the limit), and by an endpoint pipeline into a cache with 2
 *    secondary indexes (stream → records → index entries → LMDB commit → slot confirmed), timed from its restart
 *    (restart case 1: resume in place) until it has committed the last transaction's LSN.
 * 2. Latency. With the endpoint streaming, single-row insert transactions at 1 000 changes/s for `lagSeconds`:
 *    from the writer's COMMIT acknowledgement to the record being readable from the endpoint's alias through a
 *    read-only cache handle — in this process (the api-server reads the same LMDB files the same way; its HTTP
 *    layer is not part of this figure). p50 / p99 / max.
 * 3. End to end. A real `sluice-app-server` process (its own data directory, endpoint `items` on the same table,
 *    its default commit settings) and a real `sluice-api-server` process on that data directory. The same paced
 *    single-row inserts; after each COMMIT the writer reads `pg_current_wal_lsn()` (what a client does to read its
 *    own write) and sends `GET /v1/endpoints/items/records/:id` with `sluice-min-position: <lsn>`, which the
 *    api-server answers once its served generation has committed that position: COMMIT acknowledgement → 200
 *    response, p50 / p99 / max (a non-200 answer fails the run), after 1 s of the same load not counted (both
 *    processes just started), from 20 connections (each does two round trips per change). `BREAKDOWN=1` adds
 *    per-stage times of those samples (see `startProbes`).
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { freePort, spawnTs, startLogicalPostgres } from '@sluice/testkit';
import pg from 'pg';
import { LogicalReplicationService, type Pgoutput, PgoutputPlugin } from 'pg-logical-replication';
import { startEndpointPipeline } from '../src/endpoint.js';
import { compareLsn } from '../src/sources/replication/lsn.js';

const args = process.argv.slice(2).filter((a) => a !== 'cdc' && a !== '--');
const CHANGES = Number(args[0] ?? 100_000);
const LAG_SECONDS = Number(args[1] ?? 10);
const RATE = 1_000;
const TXN = 500;

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
const ms = (n: number) => `${n.toFixed(1)} ms`;

async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return client;
}

/** Writes `n` changes to `items`: inserts, then updates and deletes of inserted rows, `TXN` per transaction. */
async function writeChanges(client: pg.Client, n: number, firstId: number): Promise<void> {
  const inserts = Math.round(n * 0.6);
  const updates = Math.round(n * 0.3);
  const deletes = n - inserts - updates;
  const run = async (count: number, sql: (from: number, to: number) => string) => {
    for (let i = 0; i < count; i += TXN) {
      const to = Math.min(count, i + TXN);
      await client.query(sql(firstId + i, firstId + to - 1));
    }
  };
  await run(
    inserts,
    (a, b) =>
      `INSERT INTO items SELECT g, 'item-' || g, 'cat-' || (g % 20), (g * 7919 % 100000) / 10.0 FROM generate_series(${a}, ${b}) g`,
  );
  await run(
    updates,
    (a, b) => `UPDATE items SET value = value + 1, name = name || '+' WHERE id BETWEEN ${a} AND ${b}`,
  );
  await run(deletes, (a, b) => `DELETE FROM items WHERE id BETWEEN ${a + updates} AND ${b + updates}`);
}

/** Reads slot `slot` with the library alone until `n` row changes arrived; returns the time taken. */
async function readRaw(url: string, slot: string, n: number): Promise<number> {
  const service = new LogicalReplicationService(
    { connectionString: url },
    { acknowledge: { auto: false, timeoutSeconds: 0 }, flowControl: { enabled: false } },
  );
  let seen = 0;
  const started = performance.now();
  const done = new Promise<void>((resolve) => {
    service.on('data', (_lsn: string, message: Pgoutput.Message) => {
      if (message.tag === 'insert' || message.tag === 'update' || message.tag === 'delete') {
        seen++;
        if (seen === n) resolve();
      }
    });
  });
  const plugin = new PgoutputPlugin({ protoVersion: 1, publicationNames: ['bench_raw'] });
  void service.subscribe(plugin, slot).catch(() => {});
  await done;
  const elapsed = performance.now() - started;
  await service.destroy();
  return elapsed;
}

/**
 * PROFILE=<dir>: a CPU profile of the apply phase alone (the pipeline catching up), written as
 * `<dir>/cdc-apply.cpuprofile` — the same format as `node --cpu-prof`, for `node scripts/profile-shares.mjs <dir>`.
 */
async function startProfile(): Promise<(() => Promise<void>) | null> {
  const dir = process.env.PROFILE;
  if (!dir) return null;
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 1000 });
  await session.post('Profiler.start');
  return async () => {
    const { profile } = await session.post('Profiler.stop');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'cdc-apply.cpuprofile'), JSON.stringify(profile));
    session.disconnect();
  };
}

const APP_SERVER_BIN = fileURLToPath(new URL('../../../apps/app-server/src/bin.ts', import.meta.url));
const API_SERVER_BIN = fileURLToPath(new URL('../../../apps/api-server/src/bin.ts', import.meta.url));

interface PacedResult {
  latencies: number[];
  /** Changes per second the writers reached. */
  achieved: number;
}

/**
 * Inserts `total` single-row transactions paced at RATE/s from `writers` (writer w sends changes w, w + n, …;
 * change i is due i / RATE s after the start), keys from `firstKey`; `seen(key, lsn, committedAt)` resolves with the
 * commit → visible latency in ms (it must not hold the writer up: reads run beside the writes).
 */
async function pacedInserts(
  writers: pg.Client[],
  total: number,
  firstKey: number,
  withLsn: boolean,
  seen: (key: number, lsn: string | null, committedAt: number) => Promise<number>,
): Promise<PacedResult> {
  const reads: Array<Promise<number>> = [];
  const started = performance.now();
  await Promise.all(
    writers.map(async (writer, w) => {
      for (let i = w; i < total; i += writers.length) {
        const wait = started + (i * 1000) / RATE - performance.now();
        if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
        const key = firstKey + i;
        await writer.query(`INSERT INTO items VALUES ($1, 'lag', 'cat-0', 1)`, [key]);
        const committedAt = performance.now();
        const lsn = withLsn
          ? (await writer.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn
          : null;
        reads.push(seen(key, lsn, committedAt));
      }
    }),
  );
  const achieved = (total * 1000) / (performance.now() - started);
  const latencies = await Promise.all(reads);
  return { latencies: latencies.sort((a, b) => a - b), achieved };
}

/** Polls `probe` every 50 ms until it returns true or `timeoutMs` passed (then throws `what`). */
async function until(probe: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await probe().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * Phase 3: app-server + api-server processes, paced inserts, read-your-write through `sluice-min-position`.
 * Returns the latencies (ms, sorted) and the rate reached.
 */
async function endToEnd(url: string, total: number): Promise<PacedResult> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-cdc-e2e-'));
  const appPort = await freePort();
  const apiPort = await freePort();
  const configFile = join(dir, 'sluice.yaml');
  // JSON is YAML.
  await writeFile(
    configFile,
    JSON.stringify({
      node: { id: 'e2e', port: appPort, advertisedUrl: `http://127.0.0.1:${appPort}` },
      store: `sqlite:${join(dir, 'store.db')}`,
      dataDir: join(dir, 'data'),
      logLevel: 'warn',
      connections: { db: { type: 'postgres', url } },
      endpoints: [
        {
          name: 'items',
          source: { type: 'postgres', connection: 'db', table: 'items' },
          primaryKey: ['id'],
          fields: { id: 'integer', name: 'string', category: 'string', value: 'number' },
          indexes: [['category'], ['value']],
        },
      ],
    }),
  );
  const app = spawnTs(APP_SERVER_BIN, ['--config', configFile], { cwd: dir });
  let api: ReturnType<typeof spawnTs> | null = null;
  try {
    const appUrl = `http://127.0.0.1:${appPort}`;
    await until(
      async () => {
        if (app.child.exitCode !== null) throw new Error(`app-server exited:\n${app.output()}`);
        const body = (await (await fetch(`${appUrl}/v1/endpoints`)).json()) as {
          endpoints: Array<{
            name: string;
            servingCache: string | null;
            replication: { committedLsn: string | null } | null;
          }>;
        };
        const items = body.endpoints.find((e) => e.name === 'items');
        return items?.servingCache != null && items.replication?.committedLsn != null;
      },
      90_000,
      'the app-server endpoint to serve and stream',
    );
    api = spawnTs(API_SERVER_BIN, ['--config', configFile], { env: { SLUICE_API_PORT: String(apiPort) } });
    const apiUrl = `http://127.0.0.1:${apiPort}`;
    await until(
      async () =>
        (
          await fetch(`${apiUrl}/v1/endpoints/items/count`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: '{}',
          })
        ).ok,
      60_000,
      'the api-server to answer',
    );
    const writers = await Promise.all(Array.from({ length: 20 }, () => connect(url)));
    const probes = process.env.BREAKDOWN ? await startProbes(url, join(dir, 'data')) : null;
    const readBack = async (key: number, lsn: string | null, committedAt: number) => {
      probes?.committed(key, committedAt);
      const res = await fetch(`${apiUrl}/v1/endpoints/items/records/${key}`, {
        headers: { 'sluice-min-position': lsn! },
      });
      const at = performance.now();
      const body = await res.text();
      if (res.status !== 200)
        throw new Error(`GET records/${key} at ${lsn}: HTTP ${res.status} ${body.slice(0, 300)}`);
      probes?.answered(key, at);
      return at - committedAt;
    };
    try {
      // Warm-up (not counted): both processes were just started (their code is still being compiled).
      await pacedInserts(writers, RATE, 30_000_000, true, readBack);
      probes?.reset();
      const result = await pacedInserts(writers, total, 20_000_000, true, readBack);
      if (probes) printBreakdown(await probes.finish());
      return result;
    } finally {
      await probes?.stop();
      await Promise.all(writers.map((w) => w.end()));
    }
  } finally {
    await api?.stop('SIGTERM', 10_000);
    await app.stop('SIGTERM', 15_000);
    // The app-server's slot would hold WAL for nothing.
    const client = await connect(url);
    await client
      .query(
        `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'sluice_e2e_%' AND NOT active`,
      )
      .catch(() => {});
    await client.end();
    await rm(dir, { recursive: true, force: true });
  }
}

/** When each stage of one end-to-end sample happened (performance.now() of this process). */
interface StageTimes {
  committed?: number;
  wal?: number;
  cache?: number;
  answered?: number;
}

/**
 * BREAKDOWN=1: per-sample stage timestamps of the end-to-end phase, taken from this process — the pgoutput
 * COMMIT message of the sample's transaction arriving on a second slot of the same publication (when a
 * walsender delivers it: what the app-server receives, ±its event loop), and the record becoming readable in the
 * app-server's LMDB through a read-only handle polled every 1 ms (the app-server's cache commit as another
 * process sees it: what the api-server reads). Opt-in: the probes load the same 2 cores.
 */
async function startProbes(url: string, dataDir: string) {
  const times = new Map<number, StageTimes>();
  const at = (key: number) => {
    const known = times.get(key);
    if (known) return known;
    const t: StageTimes = {};
    times.set(key, t);
    return t;
  };
  const admin = await connect(url);
  await admin.query(`SELECT pg_create_logical_replication_slot('bench_probe', 'pgoutput')`);
  await admin.end();
  const service = new LogicalReplicationService(
    { connectionString: url },
    { acknowledge: { auto: true, timeoutSeconds: 1 }, flowControl: { enabled: false } },
  );
  let txnKeys: number[] = [];
  service.on('data', (_lsn: string, message: Pgoutput.Message) => {
    if (message.tag === 'begin') txnKeys = [];
    else if (message.tag === 'insert') txnKeys.push(Number(message.new.id));
    else if (message.tag === 'commit') {
      const now = performance.now();
      for (const key of txnKeys) at(key).wal = now;
    }
  });
  void service
    .subscribe(new PgoutputPlugin({ protoVersion: 1, publicationNames: ['bench_raw'] }), 'bench_probe')
    .catch(() => {});
  const caches = await openCacheManager(dataDir, { readOnly: true });
  const ro = await caches.openRo('items');
  const pending = new Set<number>();
  const poll = setInterval(() => {
    if (pending.size === 0) return;
    const now = performance.now();
    for (const key of pending) {
      if (ro.get([key]) === undefined) continue;
      at(key).cache = now;
      pending.delete(key);
    }
  }, 1);
  return {
    committed(key: number, now: number) {
      at(key).committed = now;
      if (at(key).cache === undefined) pending.add(key);
    },
    answered(key: number, now: number) {
      at(key).answered = now;
    },
    reset() {
      times.clear();
      pending.clear();
    },
    /** The samples with every stage seen (waits up to 2 s for the probes to catch up). */
    async finish(): Promise<Required<StageTimes>[]> {
      const deadline = Date.now() + 2_000;
      while (pending.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
      return [...times.values()].filter(
        (t): t is Required<StageTimes> =>
          t.committed !== undefined &&
          t.wal !== undefined &&
          t.cache !== undefined &&
          t.answered !== undefined,
      );
    },
    async stop() {
      clearInterval(poll);
      await ro.close();
      await caches.close();
      await service.destroy().catch(() => {});
      const client = await connect(url);
      await client.query(`SELECT pg_drop_replication_slot('bench_probe')`).catch(() => {});
      await client.end();
    },
  };
}

function printBreakdown(samples: Required<StageTimes>[]): void {
  const row = (what: string, values: number[]) => {
    const sorted = values.sort((a, b) => a - b);
    console.log(
      `| ${what} | ${ms(percentile(sorted, 50))} | ${ms(percentile(sorted, 90))} | ${ms(percentile(sorted, 99))} | ${ms(sorted.at(-1)!)} |`,
    );
  };
  console.log(`\nend-to-end breakdown (${fmt(samples.length)} samples, ms after the COMMIT acknowledgement)`);
  console.log('| stage | p50 | p90 | p99 | max |');
  console.log('|---|---|---|---|---|');
  const stages: Array<[string, (t: (typeof samples)[number]) => number]> = [
    ['pgoutput COMMIT received (probe slot)', (t) => t.wal - t.committed],
    ['readable in the app-server cache (other process)', (t) => t.cache - t.committed],
    ['200 answer from the api-server', (t) => t.answered - t.committed],
    ['  pgoutput received → readable in the cache', (t) => t.cache - t.wal],
    ['  readable in the cache → 200 answer', (t) => t.answered - t.cache],
  ];
  for (const [what, elapsed] of stages) row(what, samples.map(elapsed));
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;
}

await using server = await startLogicalPostgres();
const url = await server.createDatabase('cdc_bench');
const admin = await connect(url);
await admin.query(
  'CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, category text NOT NULL, value double precision NOT NULL)',
);
await admin.query('CREATE PUBLICATION bench_raw FOR TABLE items');
await admin.query(`SELECT pg_create_logical_replication_slot('bench_raw', 'pgoutput')`);

const dataDir = await mkdtemp(join(tmpdir(), 'sluice-cdc-bench-'));
const caches = await openCacheManager(dataDir);
const endpoint = {
  name: 'items',
  source: { type: 'postgres', connection: 'db', table: 'items' },
  primaryKey: ['id'],
  fields: { id: 'integer', name: 'string', category: 'string', value: 'number' },
  indexes: [['category'], ['value']],
} as EndpointConfig;
const context = {
  caches,
  events: { publish: async () => {} },
  connections: { db: { type: 'postgres' as const, url } },
  nodeId: 'bench',
  // The app-server's defaults (pipeline.commitEveryRecords / commitEveryMs): a transaction that ends with nothing
  // more buffered is committed at once anyway.
  commitEveryMs: 1_000,
  commitEveryRecords: 10_000,
};
const committedLsn = (pipeline: Awaited<ReturnType<typeof startEndpointPipeline>>) =>
  pipeline.status().replication?.committedLsn ?? null;

console.log(`cdc bench: ${fmt(CHANGES)} changes, then ${LAG_SECONDS} s at ${fmt(RATE)} changes/s`);
try {
  // The endpoint's slot exists (first start, empty table), then the pipeline stops: both slots see the same WAL.
  let pipeline = await startEndpointPipeline(endpoint, context);
  await pipeline.whenServing({ timeoutMs: 60_000 });
  await pipeline.stop();

  const writeStarted = performance.now();
  await writeChanges(admin, CHANGES, 1);
  const writeMs = performance.now() - writeStarted;
  const target = (await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!
    .lsn;
  console.log(`  wrote ${fmt(CHANGES)} changes in ${(writeMs / 1000).toFixed(1)} s (WAL up to ${target})`);

  const rawMs = await readRaw(url, 'bench_raw', CHANGES);
  console.log(
    `  raw replication stream: ${fmt((CHANGES * 1000) / rawMs)} changes/s in ${(rawMs / 1000).toFixed(1)} s`,
  );

  const epochBefore = (await caches.openRo('items').then(async (r) => {
    const e = r.commitState().checkpoint?.epoch ?? 0;
    await r.close();
    return e;
  })) as number;
  const stopProfile = await startProfile();
  const applyStarted = performance.now();
  pipeline = await startEndpointPipeline(endpoint, context);
  for (;;) {
    const lsn = committedLsn(pipeline);
    if (lsn !== null && compareLsn(lsn, target) >= 0) break;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const applyMs = performance.now() - applyStarted;
  await stopProfile?.();
  console.log(
    `  pipeline → cache (2 indexes): ${fmt((CHANGES * 1000) / applyMs)} changes/s in ${(applyMs / 1000).toFixed(1)} s (decision: ${pipeline.decision.decision})`,
  );
  const expected = Number((await admin.query<{ n: string }>('SELECT count(*) AS n FROM items')).rows[0]!.n);
  const reader = await caches.openRo('items');
  const records = reader.commitState().recordCount ?? null;
  console.log(
    `  cache commits during the catch-up: ${(reader.commitState().checkpoint?.epoch ?? 0) - epochBefore}`,
  );
  await reader.close();
  if (records !== null && records !== expected)
    throw new Error(`the cache holds ${records} records, the table ${expected}`);

  // Latency: single-row transactions at RATE/s from 10 connections (one connection's round trips alone cannot
  // keep the pace on a loaded machine); readable through a read-only handle of the alias.
  const writers = await Promise.all(Array.from({ length: 10 }, () => connect(url)));
  const ro = await caches.openRo('items');
  const pending = new Map<number, { at: number; resolve: (ms: number) => void }>();
  const poll = setInterval(() => {
    if (pending.size === 0) return;
    const now = performance.now();
    for (const [key, wait] of pending) {
      if (ro.get([key]) === undefined) continue;
      wait.resolve(now - wait.at);
      pending.delete(key);
    }
  }, 1);
  const total = RATE * LAG_SECONDS;
  let inProcess: PacedResult;
  try {
    inProcess = await pacedInserts(writers, total, 10_000_000, false, (key, _lsn, at) => {
      const visible = new Promise<number>((resolve, reject) => {
        pending.set(key, { at, resolve });
        setTimeout(() => reject(new Error(`row ${key} never became visible`)), 30_000).unref();
      });
      return visible;
    });
  } finally {
    clearInterval(poll);
    await ro.close();
    await Promise.all(writers.map((w) => w.end()));
    await pipeline.stop();
  }
  const latencies = inProcess.latencies;
  const achieved = inProcess.achieved;
  const lag = { p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies.at(-1)! };
  console.log(
    `  commit → visible at ${fmt(achieved)} changes/s: p50 ${ms(lag.p50)}, p99 ${ms(lag.p99)}, max ${ms(lag.max)}`,
  );

  const e2e = await endToEnd(url, total);
  const e2eLag = {
    p50: percentile(e2e.latencies, 50),
    p99: percentile(e2e.latencies, 99),
    max: e2e.latencies.at(-1)!,
  };
  console.log(
    `  commit → visible through the api-server at ${fmt(e2e.achieved)} changes/s: p50 ${ms(e2eLag.p50)}, p99 ${ms(e2eLag.p99)}, max ${ms(e2eLag.max)}`,
  );

  console.log('\n| case | changes/s | time | vs raw stream |');
  console.log('|---|---|---|---|');
  console.log(
    `| raw replication stream read alone (limit) | ${fmt((CHANGES * 1000) / rawMs)} | ${(rawMs / 1000).toFixed(1)} s | 1.00 |`,
  );
  console.log(
    `| pipeline → cache, 2 indexes (restart in place, catch up) | ${fmt((CHANGES * 1000) / applyMs)} | ${(applyMs / 1000).toFixed(1)} s | ${(rawMs / applyMs).toFixed(2)} |`,
  );
  console.log('\n| commit → visible, single-row transactions | rate | samples | p50 | p99 | max |');
  console.log('|---|---|---|---|---|---|');
  console.log(
    `| in process (pipeline in this process, read-only cache handle) | ${fmt(achieved)} changes/s | ${fmt(latencies.length)} | ${ms(lag.p50)} | ${ms(lag.p99)} | ${ms(lag.max)} |`,
  );
  console.log(
    `| end to end (app-server process → api-server process, GET with sluice-min-position) | ${fmt(e2e.achieved)} changes/s | ${fmt(e2e.latencies.length)} | ${ms(e2eLag.p50)} | ${ms(e2eLag.p99)} | ${ms(e2eLag.max)} |`,
  );
} finally {
  await admin.end().catch(() => {});
  await caches.close();
  await rm(dataDir, { recursive: true, force: true });
}
