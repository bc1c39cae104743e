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
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { startLogicalPostgres } from '@sluice/testkit';
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

  const applyStarted = performance.now();
  pipeline = await startEndpointPipeline(endpoint, context);
  for (;;) {
    const lsn = committedLsn(pipeline);
    if (lsn !== null && compareLsn(lsn, target) >= 0) break;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const applyMs = performance.now() - applyStarted;
  console.log(
    `  pipeline → cache (2 indexes): ${fmt((CHANGES * 1000) / applyMs)} changes/s in ${(applyMs / 1000).toFixed(1)} s (decision: ${pipeline.decision.decision})`,
  );
  const expected = Number((await admin.query<{ n: string }>('SELECT count(*) AS n FROM items')).rows[0]!.n);
  const reader = await caches.openRo('items');
  const records = reader.commitState().recordCount ?? null;
  await reader.close();
  if (records !== null && records !== expected)
    throw new Error(`the cache holds ${records} records, the table ${expected}`);

  // Latency: single-row transactions at RATE/s from WRITERS connections (one connection's round trips alone
  // cannot keep the pace on a loaded machine); readable through a read-only handle of the alias.
  const WRITERS = 10;
  const writers = await Promise.all(Array.from({ length: WRITERS }, () => connect(url)));
  const ro = await caches.openRo('items');
  const pending = new Map<number, number>();
  const latencies: number[] = [];
  const poll = setInterval(() => {
    if (pending.size === 0) return;
    const now = performance.now();
    for (const [key, at] of pending) {
      if (ro.get([key]) === undefined) continue;
      latencies.push(now - at);
      pending.delete(key);
    }
  }, 1);
  const total = RATE * LAG_SECONDS;
  const lagStarted = performance.now();
  await Promise.all(
    writers.map(async (writer, w) => {
      // Writer w sends changes w, w + WRITERS, …; change i is due i / RATE seconds after the start.
      for (let i = w; i < total; i += WRITERS) {
        const wait = lagStarted + (i * 1000) / RATE - performance.now();
        if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
        const key = 10_000_000 + i;
        await writer.query(`INSERT INTO items VALUES ($1, 'lag', 'cat-0', 1)`, [key]);
        pending.set(key, performance.now());
      }
    }),
  );
  const achieved = (total * 1000) / (performance.now() - lagStarted);
  const deadline = performance.now() + 30_000;
  while (pending.size > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  clearInterval(poll);
  await ro.close();
  await Promise.all(writers.map((w) => w.end()));
  await pipeline.stop();
  if (pending.size > 0) throw new Error(`${pending.size} committed rows never became visible`);
  latencies.sort((a, b) => a - b);
  const lag = { p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies.at(-1)! };
  console.log(
    `  commit → visible at ${fmt(achieved)} changes/s: p50 ${ms(lag.p50)}, p99 ${ms(lag.p99)}, max ${ms(lag.max)}`,
  );

  console.log('\n| case | changes/s | time | vs raw stream |');
  console.log('|---|---|---|---|');
  console.log(
    `| raw replication stream read alone (limit) | ${fmt((CHANGES * 1000) / rawMs)} | ${(rawMs / 1000).toFixed(1)} s | 1.00 |`,
  );
  console.log(
    `| pipeline → cache, 2 indexes (restart in place, catch up) | ${fmt((CHANGES * 1000) / applyMs)} | ${(applyMs / 1000).toFixed(1)} s | ${(rawMs / applyMs).toFixed(2)} |`,
  );
  console.log(
    '\n| commit → visible (in process, read-only cache handle) | rate | samples | p50 | p99 | max |',
  );
  console.log('|---|---|---|---|---|---|');
  console.log(
    `| single-row transactions | ${fmt(achieved)} changes/s | ${fmt(latencies.length)} | ${ms(lag.p50)} | ${ms(lag.p99)} | ${ms(lag.max)} |`,
  );
} finally {
  await admin.end().catch(() => {});
  await caches.close();
  await rm(dataDir, { recursive: true, force: true });
}
