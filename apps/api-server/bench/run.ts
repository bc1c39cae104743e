/**
 * api-server benchmark: point lookups and an indexed range query (limit 50) per second with p50/p99, under
 * autocannon, next to (a) a bare fastify route returning a fixed record of the same size — the limit of an
 * HTTP JSON server on this machine — and (b) fastify + pg answering the same lookups/queries from PostgreSQL
 * (the peer a user would pick instead). Every server runs as its own process; autocannon runs in this one.
 *
 *   pnpm --filter @sluice/api-server bench     (RECORDS=200000 DURATION=4 ROUNDS=3 CONNECTIONS=32 WARMUP=3 to change)
 *   PROFILE=<dir> … bench                       also writes the api-server's CPU profile (node --cpu-prof) there
 *   ONLY=query|lookup … bench                   one kind of run only (e.g. while profiling)
 *   PIN=1 … bench                               load generator and servers on separate cores (bench/pin.ts)
 *   API_NODE_ARGS='--max-semi-space-size=64' …  extra node flags for the api-server process only (not the peers)
 *
 * Runs are interleaved (sluice, bare, pg, sluice, ...); the table reports each target's median of ROUNDS and the
 * median of the per-round ratios (a shared machine's noise hits the targets of one round alike).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { openCacheManager } from '@sluice/cache';
import { createTestDatabase, freePort, spawnTs, tempDir } from '@sluice/testkit';
import autocannon from 'autocannon';
import pg from 'pg';
import { item } from '../test/fixtures/data.js';
import { writeConfig } from '../test/helpers.js';
import { createItemsGeneration } from './items-generation.js';
import { describePlacement, pinProcesses } from './pin.js';

const RECORDS = Number(process.env.RECORDS ?? 200_000);
const PROFILE = process.env.PROFILE;
const API_NODE_ARGS = (process.env.API_NODE_ARGS ?? '').split(' ').filter((arg) => arg !== '');
const KINDS = (['lookup', 'query'] as const).filter((k) => !process.env.ONLY || process.env.ONLY === k);
const DURATION = Number(process.env.DURATION ?? 4);
/** Rounds per target, interleaved; the best round counts (a shared machine's noise only ever slows a run down). */
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.CONNECTIONS ?? 32);
/** Seconds of warm-up per target and kind, with the measured requests. */
const WARMUP = Number(process.env.WARMUP ?? 3);
const API_BIN = fileURLToPath(new URL('../src/bin.ts', import.meta.url));
const PEERS = fileURLToPath(new URL('./peers.ts', import.meta.url));

interface Figures {
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  /** CPU time (user + system) the server process spent per answered request, in µs: less noisy than req/s. */
  cpuUs: number;
  /** Of it, system (kernel) time, in µs per request. */
  systemUs: number;
  /** Minor page faults of the server process per 1 000 requests (a cold mapping shows up here as system time). */
  faultsPerK: number;
}

/**
 * User and system CPU time of process `pid` so far, in ms, and its minor page faults (Linux `/proc/<pid>/stat`,
 * clock ticks of 10 ms).
 */
function cpuMsOf(pid: number): { user: number; system: number; faults: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may contain spaces) start after the last ')': field N is at N - 3.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: Number(fields[11]) * 10, system: Number(fields[12]) * 10, faults: Number(fields[7]) };
}

function randomId(): number {
  return 1 + Math.floor(Math.random() * RECORDS);
}

function perRequest(
  before: ReturnType<typeof cpuMsOf>,
  after: ReturnType<typeof cpuMsOf>,
  requests: number,
): { cpuUs: number; systemUs: number; faultsPerK: number } {
  const n = Math.max(1, requests);
  const systemUs = ((after.system - before.system) * 1000) / n;
  return {
    cpuUs: ((after.user - before.user) * 1000) / n + systemUs,
    systemUs,
    faultsPerK: ((after.faults - before.faults) * 1000) / n,
  };
}

type Paths = { lookup: (id: number) => string; query: string; body: (from: number) => string };

/** The requests of a run: random keys (lookups) or random range starts (queries) over the whole table. */
function randomRequests(kind: 'lookup' | 'query', paths: Paths): autocannon.Request[] {
  return [
    kind === 'lookup'
      ? {
          method: 'GET',
          setupRequest: (request) => ({ ...request, path: paths.lookup(randomId()) }),
        }
      : {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          setupRequest: (request) => ({
            ...request,
            path: paths.query,
            body: paths.body(Math.floor(Math.random() * RECORDS * 0.9)),
          }),
        },
  ];
}

async function measure(
  label: string,
  url: string,
  kind: 'lookup' | 'query',
  paths: Paths,
  pid: number,
): Promise<Figures> {
  const cpuBefore = cpuMsOf(pid);
  const result = await autocannon({
    url,
    connections: CONNECTIONS,
    duration: DURATION,
    pipelining: 1,
    requests: randomRequests(kind, paths),
  });
  const figures = {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
    ...perRequest(cpuBefore, cpuMsOf(pid), result.requests.total),
  };
  console.log(
    `  ${label.padEnd(26)} ${kind.padEnd(7)} ${Math.round(figures.rps).toString().padStart(7)} req/s  p50 ${figures.p50} ms  p99 ${figures.p99} ms  CPU ${figures.cpuUs.toFixed(0)} µs/req (system ${figures.systemUs.toFixed(0)}, ${figures.faultsPerK.toFixed(0)} faults/1k)  non-2xx ${figures.non2xx}  errors ${figures.errors}`,
  );
  return figures;
}

async function main(): Promise<void> {
  await using dir = await tempDir('sluice-api-bench-');
  console.log(
    `api-server benchmark: ${RECORDS} records, ${CONNECTIONS} connections, ${DURATION} s per run, best of ${ROUNDS} interleaved rounds`,
  );

  // The data: one generation of `items`, as the app-server would build it (record = item(id, 1)).
  const started = Date.now();
  {
    await using manager = await openCacheManager(dir.path);
    const cache = await createItemsGeneration(manager, RECORDS);
    await manager.redirect('items', cache.name);
    await cache.close();
  }
  console.log(`  loaded the cache in ${Date.now() - started} ms`);

  await using db = await createTestDatabase('sluice_api_bench');
  {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query(
      'CREATE TABLE items (id integer PRIMARY KEY, gen integer, value double precision, category text, tags jsonb)',
    );
    for (let start = 1; start <= RECORDS; start += 5_000) {
      const rows = [];
      for (let id = start; id < Math.min(start + 5_000, RECORDS + 1); id += 1) rows.push(item(id, 1));
      await client.query(
        `INSERT INTO items SELECT * FROM jsonb_to_recordset($1::jsonb) AS t(id integer, gen integer, value double precision, category text, tags jsonb)`,
        [JSON.stringify(rows)],
      );
    }
    await client.query('CREATE INDEX items_value ON items (value)');
    await client.query('ANALYZE items');
    await client.end();
  }

  const apiPort = await freePort();
  const config = await writeConfig(dir.path, { dataDir: dir.path, logLevel: 'warn', api: { port: apiPort } });
  await using api = spawnTs(API_BIN, ['--config', config], {
    env: { SLUICE_LOG_LEVEL: 'info' },
    nodeArgs: [...(PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE}`] : []), ...API_NODE_ARGS],
  });
  await api.waitForLine(/api-server listening/, 60_000);
  const barePort = await freePort();
  // The limit returns the same record and the same page (the 50 records of one range) as prebuilt objects.
  const page = Array.from({ length: 50 }, (_, i) => item(4242 + i, 1));
  await using bare = spawnTs(PEERS, ['bare', String(barePort), JSON.stringify(page)]);
  await bare.waitForLine(/peer listening/, 60_000);
  const pgPort = await freePort();
  await using pgPeer = spawnTs(PEERS, ['pg', String(pgPort), db.url]);
  await pgPeer.waitForLine(/peer listening/, 60_000);

  const sluicePaths = {
    lookup: (id: number) => `/v1/endpoints/items/records/${id}`,
    query: '/v1/endpoints/items/query',
    body: (from: number) =>
      JSON.stringify({ $filter: { value: { $gte: from } }, $order_by: { value: 'asc' }, $limit: 50 }),
  };
  const peerPaths = {
    lookup: (id: number) => `/records/${id}`,
    query: '/query',
    body: (from: number) => JSON.stringify({ from }),
  };
  const targets = [
    { label: 'sluice api-server', url: `http://127.0.0.1:${apiPort}`, paths: sluicePaths, pid: api.pid },
    { label: 'bare fastify (limit)', url: `http://127.0.0.1:${barePort}`, paths: peerPaths, pid: bare.pid },
    { label: 'fastify + pg (peer)', url: `http://127.0.0.1:${pgPort}`, paths: peerPaths, pid: pgPeer.pid },
  ];
  console.log(`  ${describePlacement(pinProcesses(targets.map((target) => target.pid)))}`);
  // Warm every server before measuring with the requests it will be measured with (random keys and ranges over
  // the whole table): the JIT, the pages of the LMDB map and of PostgreSQL's buffers, pg's plans. A warm-up of
  // one key left the first measured round of the api-server paying its mapping's first touches (page faults).
  for (const target of targets)
    for (const kind of KINDS)
      await autocannon({
        url: target.url,
        connections: CONNECTIONS,
        duration: WARMUP,
        requests: randomRequests(kind, target.paths),
      });

  // Per kind and target, every round's figures (in round order).
  const results: Record<string, Record<string, Figures[]>> = {};
  for (const kind of KINDS) {
    for (let round = 1; round <= ROUNDS; round += 1) {
      for (const target of targets) {
        results[target.label] ??= {};
        const figures = await measure(target.label, target.url, kind, target.paths, target.pid);
        const rounds = results[target.label]![kind] ?? [];
        rounds.push(figures);
        results[target.label]![kind] = rounds;
      }
    }
  }
  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  const sluice = results['sluice api-server']!;
  const bareFigures = results['bare fastify (limit)']!;
  const pgFigures = results['fastify + pg (peer)']!;
  console.log('');
  console.log(
    `| run | sluice req/s | p50 / p99 ms | bare fastify req/s (limit) | ratio vs limit | fastify+pg req/s (peer) | ratio vs peer | CPU µs/req sluice / bare / pg process |`,
  );
  console.log('|---|---|---|---|---|---|---|---|');
  for (const kind of KINDS) {
    const s = sluice[kind]!;
    const b = bareFigures[kind]!;
    const p = pgFigures[kind]!;
    const rps = (f: Figures[]) => Math.round(median(f.map((x) => x.rps)));
    const mid = s[Math.floor(s.length / 2)]!;
    const vsBare = median(s.map((x, i) => x.rps / b[i]!.rps));
    const vsPg = median(s.map((x, i) => x.rps / p[i]!.rps));
    const cpu = (f: Figures[]) => Math.round(median(f.map((x) => x.cpuUs)));
    console.log(
      `| ${kind === 'lookup' ? 'point lookup' : 'indexed range query, limit 50'} | ${rps(s)} | ${mid.p50} / ${mid.p99} | ${rps(b)} | ${vsBare.toFixed(2)} | ${rps(p)} | ${vsPg.toFixed(2)}× | ${cpu(s)} / ${cpu(b)} / ${cpu(p)} |`,
    );
  }
  const failures = Object.values(results)
    .flatMap((r) => Object.values(r).flat())
    .reduce((n, f) => n + f.non2xx + f.errors, 0);
  if (failures > 0) console.log(`WARNING: ${failures} non-2xx responses or errors during the runs`);
  await api.stop();
  await bare.stop();
  await pgPeer.stop();
}

// `bench changes` runs the change-feed benchmark instead (bench/changes.ts).
if (process.argv[2] === 'changes') void import('./changes.js');
else
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
