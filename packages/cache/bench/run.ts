/**
 * Benchmark of @sluice/cache on 1M records (override with BENCH_RECORDS), each compared in the same run with
 * its physical limit or peer:
 *   1. get by primary key                 vs raw `lmdb` get (same value encoding)        — the limit
 *   2. indexed range query, limit 50      vs PostgreSQL with a b-tree index (fresh db)   — the peer
 *   3. bulk load with two secondary indexes vs raw `lmdb` puts without indexes          — the limit
 * Run: pnpm --filter @sluice/cache bench
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseQuery, type Query } from '@sluice/core';
import { createTestDatabase } from '@sluice/testkit';
import { type DatabaseOptions, open } from 'lmdb';
import pg from 'pg';
import { openCacheManager } from '../src/index.js';

const RECORDS = Number(process.env.BENCH_RECORDS ?? 1_000_000);
const BATCH = 200_000; // records per commit (one LMDB transaction) on both sides
const GETS = 100_000;
const ROUNDS = 3; // alternating rounds; the median ratio is reported (the machine is shared)
const QUERIES = 1_000;
const SPAN = 2_000; // width of the value range queried (≈ 20 matching records per 1000 values at 1M records)
const VALUES = 100_000;

const record = (id: number) => ({
  id,
  value: (id * 7919) % VALUES,
  category: `c${id % 50}`,
  name: `item-${id}`,
  price: (id % 1000) / 10,
});

/** A deterministic PRNG so both sides see the same keys and ranges. */
function prng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), s | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function rate(count: number, ms: number): number {
  return (count / ms) * 1000;
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-cache-bench-'));
  const results: string[] = [];
  const report = (line: string) => {
    results.push(line);
    console.log(line);
  };
  console.log(`records: ${fmt(RECORDS)}, node ${process.version}, dir ${dir}`);
  try {
    // --- 3. bulk load -----------------------------------------------------------------------------------------
    const raw = open({ path: join(dir, 'raw'), maxDbs: 4 });
    // The same value encoding as the cache's records, so the ratio is the cache's own overhead.
    const rawDb = raw.openDB<Record<string, unknown>, number>({
      name: 'data',
      encoder: { useRecords: false },
    } as DatabaseOptions & { name: string });
    let t = performance.now();
    for (let start = 0; start < RECORDS; start += BATCH) {
      raw.transactionSync(() => {
        for (let id = start; id < Math.min(RECORDS, start + BATCH); id++) rawDb.putSync(id, record(id));
      });
    }
    const rawLoadMs = performance.now() - t;

    const caches = await openCacheManager(join(dir, 'sluice'), { scanCap: 100_000 });
    const cache = await caches.create({
      endpoint: 'bench',
      schema: {
        fields: { id: 'integer', value: 'integer', category: 'string', name: 'string', price: 'number' },
        primaryKey: ['id'],
        indexes: [['value'], ['category', 'value']],
      },
    });
    t = performance.now();
    for (let start = 0; start < RECORDS; start += BATCH) {
      const ops = [];
      for (let id = start; id < Math.min(RECORDS, start + BATCH); id++)
        ops.push({ op: 'upsert' as const, record: record(id) });
      cache.apply(ops);
      await cache.commit({
        dag: 'bench',
        epoch: start / BATCH + 1,
        positions: {},
        at: new Date().toISOString(),
      });
    }
    const loadMs = performance.now() - t;
    if (cache.count() !== RECORDS) throw new Error(`loaded ${cache.count()} records, expected ${RECORDS}`);
    report(
      `bulk load (2 indexes, ${BATCH}/commit): ${fmt(rate(RECORDS, loadMs))} rec/s | raw lmdb puts (no index): ${fmt(rate(RECORDS, rawLoadMs))} rec/s | ratio ${(rawLoadMs / loadMs).toFixed(2)}`,
    );

    // --- 1. get by key ---------------------------------------------------------------------------------------
    const next = prng(1);
    const ids = Int32Array.from({ length: GETS }, () => Math.floor(next() * RECORDS));
    const keys = Array.from(ids, (id) => [id]);
    let sink = 0;
    const getRatios: number[] = [];
    let bestGet = 0;
    let bestRawGet = 0;
    for (let round = 0; round <= ROUNDS; round++) {
      // Round 0 warms up both (page cache, JIT) and is not counted.
      t = performance.now();
      for (let i = 0; i < GETS; i++) sink += (rawDb.get(ids[i]!) as { value: number }).value;
      const rawGetMs = performance.now() - t;
      t = performance.now();
      for (let i = 0; i < GETS; i++) sink += cache.get(keys[i]!)!.value as number;
      const getMs = performance.now() - t;
      if (round === 0) continue;
      getRatios.push(rawGetMs / getMs);
      bestGet = Math.max(bestGet, rate(GETS, getMs));
      bestRawGet = Math.max(bestRawGet, rate(GETS, rawGetMs));
    }
    report(
      `get by key: ${fmt(bestGet)} ops/s | raw lmdb get: ${fmt(bestRawGet)} ops/s | ratio ${median(getRatios).toFixed(2)} (median of ${ROUNDS} rounds)`,
    );

    // --- 2. indexed range query, limit 50 --------------------------------------------------------------------
    await using db = await createTestDatabase('sluice_cache_bench');
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    t = performance.now();
    await client.query(
      'CREATE TABLE items (id integer PRIMARY KEY, value integer NOT NULL, category text NOT NULL, name text NOT NULL, price double precision NOT NULL)',
    );
    await client.query(
      `INSERT INTO items SELECT g, (g::bigint * 7919) % ${VALUES}, 'c' || (g % 50), 'item-' || g, (g % 1000) / 10.0 FROM generate_series(0, ${RECORDS - 1}) g`,
    );
    await client.query('CREATE INDEX items_value ON items USING btree (value)');
    await client.query('ANALYZE items');
    console.log(`postgres loaded in ${fmt(performance.now() - t)} ms`);
    const starts = Array.from({ length: QUERIES }, () => Math.floor(next() * (VALUES - SPAN)));
    const sql =
      'SELECT id, value, category, name, price FROM items WHERE value >= $1 AND value < $2 ORDER BY value, id LIMIT 50';
    const queryOf = (from: number): Query => ({
      filter: { value: { $gte: from, $lt: from + SPAN } },
      orderBy: [{ field: 'value', direction: 'asc' }],
      limit: 50,
      skip: 0,
      after: null,
    });
    // Same answers on both sides (ties on value are ordered by primary key).
    for (const from of starts.slice(0, 20)) {
      const ours = cache.query(queryOf(from)).records.map((r) => r.id);
      const theirs = (await client.query({ name: 'range', text: sql, values: [from, from + SPAN] })).rows.map(
        (r) => r.id,
      );
      if (JSON.stringify(ours) !== JSON.stringify(theirs))
        throw new Error(`answers differ for value >= ${from}`);
    }
    const queryRatios: number[] = [];
    let bestQuery = 0;
    let bestPg = 0;
    let bestParsed = 0;
    for (let round = 0; round <= ROUNDS; round++) {
      t = performance.now();
      for (const from of starts)
        sink += (await client.query({ name: 'range', text: sql, values: [from, from + SPAN] })).rows.length;
      const pgMs = performance.now() - t;
      t = performance.now();
      for (const from of starts) {
        const result = cache.query(queryOf(from));
        if (result.plan.index !== 'value') throw new Error(`planner chose ${result.plan.index}`);
        sink += result.records.length;
      }
      const queryMs = performance.now() - t;
      t = performance.now();
      for (const from of starts)
        sink += cache.query(
          parseQuery({
            $filter: { value: { $gte: from, $lt: from + SPAN } },
            $order_by: { value: 'asc' },
            $limit: 50,
          }),
        ).records.length;
      const parsedMs = performance.now() - t;
      if (round === 0) continue;
      queryRatios.push(pgMs / queryMs);
      bestQuery = Math.max(bestQuery, rate(QUERIES, queryMs));
      bestPg = Math.max(bestPg, rate(QUERIES, pgMs));
      bestParsed = Math.max(bestParsed, rate(QUERIES, parsedMs));
    }
    report(
      `range query, limit 50 (index on value): ${fmt(bestQuery)} q/s | postgres b-tree (prepared, 1 connection): ${fmt(bestPg)} q/s | ratio ${median(queryRatios).toFixed(2)} (median)`,
    );
    report(`  same query incl. core parseQuery of the wire form: ${fmt(bestParsed)} q/s`);
    await client.end();
    await caches.close();
    await raw.close();
    if (sink === 42) console.log('');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  console.log('\nsummary');
  for (const line of results) console.log(line);
}

await main();
