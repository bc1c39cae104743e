/**
 * Idempotent-submit throughput of the store, next to the physical limit: a raw
 * `INSERT … ON CONFLICT (id) DO NOTHING` of the same row through the same driver in the same run.
 *
 *   pnpm --filter @sluice/store bench [-- --sqlite-ops 20000 --pg-ops 4000 --pg-concurrency 16 --rounds 2]
 *
 * Cases: new ids (every submit inserts) and duplicate ids (every submit finds the record). Each case runs
 * raw and store alternately `rounds` times on fresh tables and keeps each side's best rate. The raw side is
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
    rounds: { type: 'string', default: '3' },
  },
});
const SQLITE_OPS = Number(args['sqlite-ops']);
const PG_OPS = Number(args['pg-ops']);
const PG_CONCURRENCY = Number(args['pg-concurrency']);
const ROUNDS = Number(args.rounds);
const LEASE_MS = 30_000;
const owner = { nodeId: 'bench', address: 'http://bench:7070', instanceId: 'bench-1' };

const COLUMNS =
  'id, request_hash, request, state, owner_node_id, owner_address, owner_instance, epoch, lease_expires_at, attempts, error, result, checkpoint, created_at, updated_at';
const RAW_INSERT_SQLITE = `insert into transfers (${COLUMNS}) values (?, ?, ?, 'RECEIVED', ?, ?, ?, 1, ?, 1, null, null, null, ?, ?) on conflict (id) do nothing`;
const RAW_INSERT_PG = `insert into transfers (${COLUMNS}) values ($1, $2, $3, 'RECEIVED', $4, $5, $6, 1, $7, 1, null, null, null, $8, $9) on conflict (id) do nothing`;

interface Item {
  input: SubmitInput;
}

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
    return { input: { request, requestHash: requestHash(request), owner, leaseMs: LEASE_MS } };
  });
}

function rawParams(item: Item): unknown[] {
  const now = Date.now();
  const { request, requestHash: hash } = item.input;
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

async function timed(n: number, run: () => Promise<void>): Promise<number> {
  const started = process.hrtime.bigint();
  await run();
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return n / seconds;
}

/** Runs `op` over `items` with `concurrency` workers. */
async function pool<T>(items: T[], concurrency: number, op: (item: T) => Promise<unknown>): Promise<void> {
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

interface CaseResult {
  dialect: string;
  kind: 'new ids' | 'duplicate ids';
  raw: number;
  store: number;
}

async function benchSqlite(): Promise<CaseResult[]> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-store-bench-'));
  try {
    const results: CaseResult[] = [];
    let best = { rawNew: 0, storeNew: 0, rawDup: 0, storeDup: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      // Raw: the same schema (migrated by the store), better-sqlite3 with one prepared statement, same pragmas.
      const rawPath = join(dir, `raw-${round}.db`);
      await (await openStore(`sqlite:${rawPath}`)).close();
      const raw = new Database(rawPath);
      raw.pragma('journal_mode = WAL');
      raw.pragma('synchronous = NORMAL');
      const insert = raw.prepare(RAW_INSERT_SQLITE);
      const rawItems = makeItems(`raw${round}`, SQLITE_OPS);
      for (const item of makeItems(`warm-raw${round}`, 500)) insert.run(rawParams(item));
      const rawNew = await timed(SQLITE_OPS, async () => {
        for (const item of rawItems) insert.run(rawParams(item));
      });
      const rawDup = await timed(SQLITE_OPS, async () => {
        for (const item of rawItems) insert.run(rawParams(item));
      });
      raw.close();

      const store = await openStore(`sqlite:${join(dir, `store-${round}.db`)}`);
      const storeItems = makeItems(`store${round}`, SQLITE_OPS);
      for (const item of makeItems(`warm-store${round}`, 500)) await store.submit(item.input);
      const storeNew = await timed(SQLITE_OPS, async () => {
        for (const item of storeItems) await store.submit(item.input);
      });
      const storeDup = await timed(SQLITE_OPS, async () => {
        for (const item of storeItems) await store.submit(item.input);
      });
      await store.close();
      best = {
        rawNew: Math.max(best.rawNew, rawNew),
        storeNew: Math.max(best.storeNew, storeNew),
        rawDup: Math.max(best.rawDup, rawDup),
        storeDup: Math.max(best.storeDup, storeDup),
      };
    }
    results.push({ dialect: 'sqlite', kind: 'new ids', raw: best.rawNew, store: best.storeNew });
    results.push({ dialect: 'sqlite', kind: 'duplicate ids', raw: best.rawDup, store: best.storeDup });
    return results;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function benchPostgres(): Promise<CaseResult[]> {
  let best = { rawNew: 0, storeNew: 0, rawDup: 0, storeDup: 0 };
  for (let round = 0; round < ROUNDS; round++) {
    await using rawDb = await createTestDatabase('sluice_store_bench');
    await (await openStore(rawDb.url)).close(); // same schema
    const raw = new pg.Pool({ connectionString: rawDb.url, max: PG_CONCURRENCY });
    const rawItems = makeItems(`raw${round}`, PG_OPS);
    await pool(makeItems(`warm-raw${round}`, 300), PG_CONCURRENCY, (item) =>
      raw.query({ name: 'raw_insert', text: RAW_INSERT_PG, values: rawParams(item) }),
    );
    const rawNew = await timed(PG_OPS, () =>
      pool(rawItems, PG_CONCURRENCY, (item) =>
        raw.query({ name: 'raw_insert', text: RAW_INSERT_PG, values: rawParams(item) }),
      ),
    );
    const rawDup = await timed(PG_OPS, () =>
      pool(rawItems, PG_CONCURRENCY, (item) =>
        raw.query({ name: 'raw_insert', text: RAW_INSERT_PG, values: rawParams(item) }),
      ),
    );
    await raw.end();

    await using storeDb = await createTestDatabase('sluice_store_bench');
    const store = await openStore(storeDb.url, { poolSize: PG_CONCURRENCY });
    const storeItems = makeItems(`store${round}`, PG_OPS);
    await pool(makeItems(`warm-store${round}`, 300), PG_CONCURRENCY, (item) => store.submit(item.input));
    const storeNew = await timed(PG_OPS, () =>
      pool(storeItems, PG_CONCURRENCY, (item) => store.submit(item.input)),
    );
    const storeDup = await timed(PG_OPS, () =>
      pool(storeItems, PG_CONCURRENCY, (item) => store.submit(item.input)),
    );
    await store.close();
    best = {
      rawNew: Math.max(best.rawNew, rawNew),
      storeNew: Math.max(best.storeNew, storeNew),
      rawDup: Math.max(best.rawDup, rawDup),
      storeDup: Math.max(best.storeDup, storeDup),
    };
  }
  return [
    { dialect: 'postgres', kind: 'new ids', raw: best.rawNew, store: best.storeNew },
    { dialect: 'postgres', kind: 'duplicate ids', raw: best.rawDup, store: best.storeDup },
  ];
}

function format(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

console.log(
  `store submit benchmark: sqlite ${SQLITE_OPS} ops sequential; postgres ${PG_OPS} ops, ${PG_CONCURRENCY} in flight; best of ${ROUNDS} rounds`,
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
