/**
 * Benchmark of @sluice/cache on 1M records (override with BENCH_RECORDS), each compared in the same run with
 * its physical limit or peer:
 *   1. get by primary key                 vs raw `lmdb` get of the same bytes                    — the limit
 *   2. indexed range query, limit 50      vs raw `lmdb` range over an index + gets of the same bytes — the limit
 *                                         (issue 15's), raw `lmdb` range over covering entries (what the cache's
 *                                         layout costs at least), and PostgreSQL with a b-tree index, prepared
 *                                         statement — the peer
 *   3. bulk load with two secondary indexes vs raw `lmdb` batched puts of the same records and index entries
 * Run: pnpm --filter @sluice/cache bench
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseQuery, type Query } from '@sluice/core';
import { createTestDatabase } from '@sluice/testkit';
import { open } from 'lmdb';
import pg from 'pg';
import { openCacheManager, recordSerializer } from '../src/index.js';
import { encodeKey, stringBudget, writeNumberComponent } from '../src/key-codec.js';

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

/** The id ending an encoded (value, id) index key: its last 9 bytes are the id's number component. */
function decodeTrailingId(key: Buffer): number {
  const body = Buffer.from(key.subarray(key.length - 8));
  if ((body[0]! & 0x80) !== 0) body[0]! &= 0x7f;
  else for (let i = 0; i < 8; i++) body[i] = ~body[i]! & 0xff;
  return body.readDoubleBE(0);
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
    // The limit: the same stored bytes (the cache's JSON text) and the same index entries (the cache's key
    // codec), put in key order per batch in one transaction each — what the cache must write, and nothing else.
    const schema = {
      fields: { id: 'integer', value: 'integer', category: 'string', name: 'string', price: 'number' },
      primaryKey: ['id'],
      indexes: [['value'], ['category', 'value']],
    } as const;
    const serialize = recordSerializer(schema as never);
    const raw = open({ path: join(dir, 'raw'), maxDbs: 4 });
    const rawDb = raw.openDB<Buffer, Buffer>({ name: 'data', keyEncoding: 'binary', encoding: 'binary' });
    const rawValue = raw.openDB<Buffer, Buffer>({ name: 'value', keyEncoding: 'binary', encoding: 'binary' });
    const rawCatValue = raw.openDB<Buffer, Buffer>({ name: 'cv', keyEncoding: 'binary', encoding: 'binary' });
    const budget2 = stringBudget(2);
    const budget3 = stringBudget(3);
    const dataKeyOf = (id: number) => encodeKey([id], stringBudget(1));
    const byKey = (a: [Buffer, Buffer], b: [Buffer, Buffer]) => Buffer.compare(a[0], b[0]);
    let t = performance.now();
    for (let start = 0; start < RECORDS; start += BATCH) {
      const data: Array<[Buffer, Buffer]> = [];
      const byValue: Array<[Buffer, Buffer]> = [];
      const byCatValue: Array<[Buffer, Buffer]> = [];
      for (let id = start; id < Math.min(RECORDS, start + BATCH); id++) {
        const r = record(id);
        const key = dataKeyOf(id);
        const bytes = Buffer.from(serialize(r));
        data.push([key, bytes]);
        // The cache's index entries are covering (record format 3): they hold the record's bytes too.
        byValue.push([encodeKey([r.value, id], budget2), bytes]);
        byCatValue.push([encodeKey([r.category, r.value, id], budget3), bytes]);
      }
      byValue.sort(byKey);
      byCatValue.sort(byKey);
      raw.transactionSync(() => {
        for (const [k, v] of data) rawDb.putSync(k, v);
        for (const [k, v] of byValue) rawValue.putSync(k, v);
        for (const [k, v] of byCatValue) rawCatValue.putSync(k, v);
      });
    }
    const rawLoadMs = performance.now() - t;

    const caches = await openCacheManager(join(dir, 'sluice'), { scanCap: 100_000 });
    const cache = await caches.create({
      endpoint: 'bench',
      schema: {
        fields: { ...schema.fields },
        primaryKey: [...schema.primaryKey],
        indexes: schema.indexes.map((i) => [...i]),
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
      `bulk load (2 indexes, ${BATCH}/commit): ${fmt(rate(RECORDS, loadMs))} rec/s | raw lmdb puts of records + index entries: ${fmt(rate(RECORDS, rawLoadMs))} rec/s | ratio ${(rawLoadMs / loadMs).toFixed(2)}`,
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
      const scratch = Buffer.allocUnsafe(9);
      for (let i = 0; i < GETS; i++) sink += rawDb.get(writeNumberComponent(scratch, ids[i]!))!.length;
      const rawGetMs = performance.now() - t;
      t = performance.now();
      for (let i = 0; i < GETS; i++) sink += cache.getJson(keys[i]!)!.length;
      const getMs = performance.now() - t;
      if (round === 0) continue;
      getRatios.push(rawGetMs / getMs);
      bestGet = Math.max(bestGet, rate(GETS, getMs));
      bestRawGet = Math.max(bestRawGet, rate(GETS, rawGetMs));
    }
    report(
      `get by key (stored bytes): ${fmt(bestGet)} ops/s | raw lmdb get of the same bytes: ${fmt(bestRawGet)} ops/s | ratio ${median(getRatios).toFixed(2)} (median of ${ROUNDS} rounds)`,
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
    // The limit (issue 15): an index of data keys, its range and gets of the same bytes, straight on lmdb.
    const rawKeys = raw.openDB<Buffer, Buffer>({ name: 'keys', keyEncoding: 'binary', encoding: 'binary' });
    raw.transactionSync(() => {
      for (const { key } of rawValue.getRange()) rawKeys.putSync(key, dataKeyOf(decodeTrailingId(key)));
    });
    const rawRange = (from: number): Buffer[] => {
      const out: Buffer[] = [];
      for (const { value } of rawKeys.getRange({
        start: encodeKey([from], budget2),
        end: encodeKey([from + SPAN], budget2),
        limit: 50,
      }))
        out.push(rawDb.get(value)!);
      return out;
    };
    // What the covering layout itself costs at least: the same range over entries holding the bytes.
    const rawCovering = (from: number): Buffer[] => {
      const out: Buffer[] = [];
      for (const { value } of rawValue.getRange({
        start: encodeKey([from], budget2),
        end: encodeKey([from + SPAN], budget2),
        limit: 50,
      }))
        out.push(value);
      return out;
    };
    for (const from of starts.slice(0, 20)) {
      const ours = cache.queryJson(queryOf(from)).json.toString();
      for (const rawAnswer of [rawRange(from), rawCovering(from)])
        if (ours !== `[${rawAnswer.map((b) => b.toString()).join(',')}]`)
          throw new Error(`raw lmdb answers differ for value >= ${from}`);
    }
    const queryRatios: number[] = [];
    const rawRatios: number[] = [];
    const coveringRatios: number[] = [];
    let bestQuery = 0;
    let bestPg = 0;
    let bestRaw = 0;
    let bestCovering = 0;
    let bestDecoded = 0;
    let bestParsed = 0;
    for (let round = 0; round <= ROUNDS; round++) {
      t = performance.now();
      for (const from of starts)
        sink += (await client.query({ name: 'range', text: sql, values: [from, from + SPAN] })).rows.length;
      const pgMs = performance.now() - t;
      t = performance.now();
      for (const from of starts) sink += rawRange(from).length;
      const rawMs = performance.now() - t;
      t = performance.now();
      for (const from of starts) sink += rawCovering(from).length;
      const coveringMs = performance.now() - t;
      t = performance.now();
      for (const from of starts) {
        const result = cache.queryJson(queryOf(from));
        if (result.plan.index !== 'value') throw new Error(`planner chose ${result.plan.index}`);
        sink += result.count;
      }
      const queryMs = performance.now() - t;
      t = performance.now();
      for (const from of starts) sink += cache.query(queryOf(from)).records.length;
      const decodedMs = performance.now() - t;
      t = performance.now();
      for (const from of starts)
        sink += cache.queryJson(
          parseQuery({
            $filter: { value: { $gte: from, $lt: from + SPAN } },
            $order_by: { value: 'asc' },
            $limit: 50,
          }),
        ).count;
      const parsedMs = performance.now() - t;
      if (round === 0) continue;
      queryRatios.push(pgMs / queryMs);
      rawRatios.push(rawMs / queryMs);
      coveringRatios.push(coveringMs / queryMs);
      bestQuery = Math.max(bestQuery, rate(QUERIES, queryMs));
      bestPg = Math.max(bestPg, rate(QUERIES, pgMs));
      bestRaw = Math.max(bestRaw, rate(QUERIES, rawMs));
      bestCovering = Math.max(bestCovering, rate(QUERIES, coveringMs));
      bestDecoded = Math.max(bestDecoded, rate(QUERIES, decodedMs));
      bestParsed = Math.max(bestParsed, rate(QUERIES, parsedMs));
    }
    report(
      `range query, limit 50 (index on value, stored bytes): ${fmt(bestQuery)} q/s | raw lmdb range + gets: ${fmt(bestRaw)} q/s | ratio ${median(rawRatios).toFixed(2)} (median)`,
    );
    report(
      `range query, limit 50 (index on value, stored bytes): ${fmt(bestQuery)} q/s | raw lmdb range over covering entries: ${fmt(bestCovering)} q/s | ratio ${median(coveringRatios).toFixed(2)} (median)`,
    );
    report(
      `range query, limit 50 (index on value, stored bytes): ${fmt(bestQuery)} q/s | postgres b-tree (prepared, 1 connection): ${fmt(bestPg)} q/s | ratio ${median(queryRatios).toFixed(2)} (median)`,
    );
    report(`  same query answered as decoded records (RoCache.query): ${fmt(bestDecoded)} q/s`);
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
