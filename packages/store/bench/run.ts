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
 * Times several sides on the same number of operations each, alternating in chunks (rotating which side goes
 * first), so all see the same machine: the load of a shared 2-core host changes from second to second.
 * Returns ops/s per side.
 */
async function interleaved(sides: Array<{ items: Item[]; run: Side }>): Promise<number[]> {
  const ns = sides.map(() => 0n);
  const total = sides[0]!.items.length;
  for (let k = 0, offset = 0; offset < total; k++, offset += CHUNK) {
    for (let j = 0; j < sides.length; j++) {
      const index = (j + k) % sides.length;
      const side = sides[index]!;
      const started = process.hrtime.bigint();
      await side.run(side.items.slice(offset, offset + CHUNK));
      ns[index]! += process.hrtime.bigint() - started;
    }
  }
  return ns.map((n, i) => sides[i]!.items.length / (Number(n) / 1e9));
}

interface CaseResult {
  dialect: string;
  kind: 'new ids' | 'duplicate ids';
  raw: number;
  store: number;
  /** Duplicates only: the same semantics written by hand (the raw statement does not read the record back). */
  byHand?: number;
}

/**
 * Both cases on one dialect, from the same three sides: a warm-up of raw and store, then new ids (every submit
 * inserts), then the same ids again (every submit finds its record), with the by-hand side beside them.
 */
async function measureCases(
  dialect: string,
  counts: { warmOps: number; ops: number },
  sides: { raw: Side; store: Side; byHand: Side },
): Promise<CaseResult[]> {
  await interleaved([
    { items: makeItems('warm-raw', counts.warmOps), run: sides.raw },
    { items: makeItems('warm-store', counts.warmOps), run: sides.store },
  ]);
  const rawItems = makeItems('raw', counts.ops);
  const storeItems = makeItems('store', counts.ops);
  const [rawNew, storeNew] = await interleaved([
    { items: rawItems, run: sides.raw },
    { items: storeItems, run: sides.store },
  ]);
  const [rawDup, storeDup, byHand] = await interleaved([
    { items: rawItems, run: sides.raw },
    { items: storeItems, run: sides.store },
    { items: rawItems, run: sides.byHand },
  ]);
  return [
    { dialect, kind: 'new ids', raw: rawNew!, store: storeNew! },
    { dialect, kind: 'duplicate ids', raw: rawDup!, store: storeDup!, byHand: byHand! },
  ];
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
    const select = raw.prepare('select * from transfers where id = ?');
    const store = await openStore(`sqlite:${join(dir, 'store.db')}`);
    const rawSide: Side = async (items) => {
      for (const item of items) insert.run(rawParams(item));
    };
    // What a duplicate submit has to do at least: read the row and decode the request.
    const byHandSide: Side = async (items) => {
      for (const item of items) {
        const row = select.get(item.request.id) as { request_hash: string; request: string };
        if (row.request_hash !== item.requestHash) throw new Error('conflict');
        JSON.parse(row.request);
      }
    };
    const storeSide: Side = async (items) => {
      for (const item of items) await store.submit(item);
    };
    const results = await measureCases(
      'sqlite',
      { warmOps: 1000, ops: SQLITE_OPS },
      {
        raw: rawSide,
        store: storeSide,
        byHand: byHandSide,
      },
    );
    raw.close();
    await store.close();
    return results;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** What a duplicate submit has to do at least on PostgreSQL, in one round trip: insert-or-read the row. */
const BY_HAND_PG = `with ins as (${RAW_INSERT_PG} returning *)
  select 1 as created, ins.* from ins
  union all select 0 as created, t.* from transfers t where t.id = $1 and not exists (select 1 from ins)`;

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
    const byHandSide: Side = (items) =>
      inParallel(items, PG_CONCURRENCY, async (item) => {
        const { rows } = await raw.query({ name: 'by_hand', text: BY_HAND_PG, values: rawParams(item) });
        JSON.parse(rows[0].request);
      });
    const storeSide: Side = (items) => inParallel(items, PG_CONCURRENCY, (item) => store.submit(item));
    return await measureCases(
      'postgres',
      { warmOps: 500, ops: PG_OPS },
      {
        raw: rawSide,
        store: storeSide,
        byHand: byHandSide,
      },
    );
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
  '| dialect  | case          | raw INSERT … ON CONFLICT DO NOTHING (ops/s) | store.submit (ops/s) | ratio | same work by hand (ops/s) | ratio to it |',
);
console.log(
  '|----------|---------------|--------------------------------------------:|---------------------:|------:|--------------------------:|------------:|',
);
for (const r of results) {
  const byHand = r.byHand === undefined ? ['—', '—'] : [format(r.byHand), (r.store / r.byHand).toFixed(2)];
  console.log(
    `| ${r.dialect.padEnd(8)} | ${r.kind.padEnd(13)} | ${format(r.raw).padStart(43)} | ${format(r.store).padStart(20)} | ${(r.store / r.raw).toFixed(2).padStart(5)} | ${byHand[0]!.padStart(25)} | ${byHand[1]!.padStart(11)} |`,
  );
}
