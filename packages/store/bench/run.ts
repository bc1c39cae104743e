/**
 * Idempotent-submit throughput of the store, next to the physical limit: a raw
 * `INSERT … ON CONFLICT (id) DO NOTHING` of the same row through the same driver in the same run.
 *
 *   pnpm --filter @sluice/store bench [-- --sqlite-ops 20000 --pg-ops 4000 --pg-concurrency 16 --chunk 250]
 *
 * Cases: new ids (every submit inserts) and duplicate ids (every submit finds the record). Raw and store run
 * interleaved in small chunks on their own tables, so both see the same machine load. The raw side is
 * the best the driver can do: one prepared statement (better-sqlite3) / a named prepared statement (pg),
 * the same row, the same schema and indexes, the same pool size and concurrency.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseTransferRequest, requestHash, type SubmitInput, type TransferRequest } from '@sluice/core';
import { createTestDatabase } from '@sluice/testkit';
import Database from 'better-sqlite3';
import pg from 'pg';
import { openStore } from '../src/index.js';

const { values: args } = parseArgs({
  args: process.argv.slice(2).filter((arg) => arg !== '--'),
  options: {
    'sqlite-ops': { type: 'string', default: '20000' },
    'pg-ops': { type: 'string', default: '4000' },
    'pg-concurrency': { type: 'string', default: '16' },
    chunk: { type: 'string', default: '250' },
  },
});
const SQLITE_OPS = Number(args['sqlite-ops']);
const PG_OPS = Number(args['pg-ops']);
const PG_CONCURRENCY = Number(args['pg-concurrency']);
const CHUNK = Number(args.chunk);
const LEASE_MS = 30_000;
const owner = { nodeId: 'bench', address: 'http://bench:7070', instanceId: 'bench-1' };

const COLUMNS =
  'id, request_hash, request, state, owner_node_id, owner_address, owner_instance, epoch, lease_expires_at, attempts, error, result, checkpoint, created_at, updated_at';
const RAW_INSERT_SQLITE = `insert into transfers (${COLUMNS}) values (?, ?, ?, 'RECEIVED', ?, ?, ?, 1, ?, 1, null, null, null, ?, ?) on conflict (id) do nothing`;
const RAW_INSERT_PG = `insert into transfers (${COLUMNS}) values ($1, $2, $3, 'RECEIVED', $4, $5, $6, 1, $7, 1, null, null, null, $8, $9) on conflict (id) do nothing`;

type Item = SubmitInput;

/** Requests shaped like real ones (about 300 bytes of JSON); hashes are computed by the caller, as in the app. */
function makeItems(prefix: string, n: number): Item[] {
  return Array.from({ length: n }, (_, i) => {
    const request: TransferRequest = parseTransferRequest({
      id: `${prefix}-${i}`,
      source: { type: 'file', path: `/data/orders-${i}.jsonl`, format: 'jsonl' },
      destination: { type: 'file', path: `/out/orders-${i}.jsonl`, format: 'jsonl' },
      properties: { requestedBy: 'billing', batch: i },
      options: { maxRecordsPerSecond: 500 },
    });
    return { request, requestHash: requestHash(request), owner, leaseMs: LEASE_MS };
  });
}

function rawParams(item: Item): unknown[] {
  const now = Date.now();
  const { request, requestHash: hash } = item;
  return [
    request.id,
    hash,
    JSON.stringify(request),
    owner.nodeId,
    owner.address,
    owner.instanceId,
    now + LEASE_MS,
    now,
    now,
  ];
}

/** Runs `op` over `items` with `concurrency` workers. */
async function inParallel<T>(
  items: T[],
  concurrency: number,
  op: (item: T) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) {
        const item = items[next++]!;
        await op(item);
      }
    }),
  );
}

type Side = (items: Item[]) => Promise<void>;

/**
 * Times raw and store on the same number of operations, alternating in chunks (and which side goes first), so
 * both see the same machine: the load of a shared 2-core host changes from second to second.
 */
async function interleaved(rawItems: Item[], storeItems: Item[], raw: Side, store: Side) {
  let rawNs = 0n;
  let storeNs = 0n;
  for (let k = 0, offset = 0; offset < rawItems.length; k++, offset += CHUNK) {
    const sides: Array<[Side, Item[], (ns: bigint) => void]> = [
      [raw, rawItems.slice(offset, offset + CHUNK), (ns) => (rawNs += ns)],
      [store, storeItems.slice(offset, offset + CHUNK), (ns) => (storeNs += ns)],
    ];
    if (k % 2 === 1) sides.reverse();
    for (const [run, items, add] of sides) {
      const started = process.hrtime.bigint();
      await run(items);
      add(process.hrtime.bigint() - started);
    }
  }
  return { raw: rawItems.length / (Number(rawNs) / 1e9), store: storeItems.length / (Number(storeNs) / 1e9) };
}

interface CaseResult {
  dialect: string;
  kind: 'new ids' | 'duplicate ids';
  raw: number;
  store: number;
}

async function benchSqlite(): Promise<CaseResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-store-bench-'));
  try {
    // Raw: the same schema (migrated by the store), better-sqlite3 with one prepared statement, same pragmas.
    const rawPath = join(dir, 'raw.db');
    await (await openStore(`sqlite:${rawPath}`)).close();
    const raw = new Database(rawPath);
    raw.pragma('journal_mode = WAL');
    raw.pragma('synchronous = NORMAL');
    const insert = raw.prepare(RAW_INSERT_SQLITE);
    const store = await openStore(`sqlite:${join(dir, 'store.db')}`);
    const rawSide: Side = async (items) => {
      for (const item of items) insert.run(rawParams(item));
    };
    const storeSide: Side = async (items) => {
      for (const item of items) await store.submit(item);
    };
    await interleaved(makeItems('warm-raw', 1000), makeItems('warm-store', 1000), rawSide, storeSide);
    const rawItems = makeItems('raw', SQLITE_OPS);
    const storeItems = makeItems('store', SQLITE_OPS);
    const fresh = await interleaved(rawItems, storeItems, rawSide, storeSide);
    const dup = await interleaved(rawItems, storeItems, rawSide, storeSide);
    raw.close();
    await store.close();
    return [
      { dialect: 'sqlite', kind: 'new ids', ...fresh },
      { dialect: 'sqlite', kind: 'duplicate ids', ...dup },
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function benchPostgres(): Promise<CaseResult[]> {
  await using rawDb = await createTestDatabase('sluice_store_bench');
  await using storeDb = await createTestDatabase('sluice_store_bench');
  await (await openStore(rawDb.url)).close(); // same schema
  const raw = new pg.Pool({ connectionString: rawDb.url, max: PG_CONCURRENCY });
  const store = await openStore(storeDb.url, { poolSize: PG_CONCURRENCY });
  try {
    const rawSide: Side = (items) =>
      inParallel(items, PG_CONCURRENCY, (item) =>
        raw.query({ name: 'raw_insert', text: RAW_INSERT_PG, values: rawParams(item) }),
      );
    const storeSide: Side = (items) => inParallel(items, PG_CONCURRENCY, (item) => store.submit(item));
    await interleaved(makeItems('warm-raw', 500), makeItems('warm-store', 500), rawSide, storeSide);
    const rawItems = makeItems('raw', PG_OPS);
    const storeItems = makeItems('store', PG_OPS);
    const fresh = await interleaved(rawItems, storeItems, rawSide, storeSide);
    const dup = await interleaved(rawItems, storeItems, rawSide, storeSide);
    return [
      { dialect: 'postgres', kind: 'new ids', ...fresh },
      { dialect: 'postgres', kind: 'duplicate ids', ...dup },
    ];
  } finally {
    await raw.end();
    await store.close();
  }
}

function format(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

console.log(
  `store submit benchmark: sqlite ${SQLITE_OPS} ops sequential; postgres ${PG_OPS} ops, ${PG_CONCURRENCY} in flight; raw and store interleaved in chunks of ${CHUNK}`,
);
console.log(`node ${process.version}, ${(await import('node:os')).cpus().length} cores`);
const results = [...(await benchSqlite()), ...(await benchPostgres())];
console.log('');
console.log(
  '| dialect  | case          | raw INSERT … ON CONFLICT DO NOTHING (ops/s) | store.submit (ops/s) | ratio |',
);
console.log(
  '|----------|---------------|--------------------------------------------:|---------------------:|------:|',
);
for (const r of results) {
  console.log(
    `| ${r.dialect.padEnd(8)} | ${r.kind.padEnd(13)} | ${format(r.raw).padStart(43)} | ${format(r.store).padStart(20)} | ${(r.store / r.raw).toFixed(2).padStart(5)} |`,
  );
}
