/**
 * Instructions per request, counted by valgrind's callgrind (user space, every thread of the server process): the
 * api-server next to the bare fastify route (the limit of `run.ts`) and a plain `node:http` server writing a fixed
 * record. Counts do not depend on what else the machine runs, so this compares code paths where req/s and CPU
 * time on a shared 2-core machine cannot; they say nothing about stalls (cache misses, the kernel), which
 * `CACHESIM=1` adds as simulated cache misses per request. Why and what was measured: BENCHMARKS.md § Issue 15,
 * session 18.
 *
 *   pnpm --filter @sluice/api-server bench:instructions            lookups and range queries, all three servers
 *   KIND=query TARGETS=sluice,bare REQUESTS=3000 CACHESIM=1 …      one kind, some servers, simulated caches
 *
 * Each server is started under callgrind with instrumentation off, warmed with `WARMUP` requests (default 20 000,
 * so V8 has optimized the hot paths), then counted over `REQUESTS` requests (default 5 000) on 8 keep-alive
 * connections. V8's optimization decisions differ between runs, so a server's count can differ by tens of percent
 * between two runs (one bare fastify run spent a third of its instructions in V8's runtime defining properties):
 * run it twice before reading a difference.
 */
import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openCacheManager } from '@sluice/cache';
import { freePort, tempDir } from '@sluice/testkit';
import { item } from '../test/fixtures/data.js';
import { writeConfig } from '../test/helpers.js';
import { createItemsGeneration } from './items-generation.js';

const RECORDS = Number(process.env.RECORDS ?? 200_000);
const WARMUP = Number(process.env.WARMUP ?? 20_000);
const REQUESTS = Number(process.env.REQUESTS ?? 5_000);
const CONNECTIONS = 8;
const KINDS = (['lookup', 'query'] as const).filter((k) => !process.env.KIND || process.env.KIND === k);
const TARGETS = (process.env.TARGETS ?? 'sluice,bare,plain').split(',');
const API_BIN = fileURLToPath(new URL('../src/bin.ts', import.meta.url));
const PEERS = fileURLToPath(new URL('./peers.ts', import.meta.url));
const TSX = fileURLToPath(import.meta.resolve('tsx/esm'));

type Kind = (typeof KINDS)[number];

/** A plain node:http server answering every request with one fixed record (no routing, no framework). */
const PLAIN_SERVER = `
const http = require('node:http');
const record = Buffer.from(process.argv[2]);
http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, ['content-type', 'application/json; charset=utf-8', 'content-length', String(record.length)]);
    res.end(record);
  });
}).listen(Number(process.argv[1]), '127.0.0.1', () => console.log('plain listening'));
`;

interface Target {
  args: (port: number) => string[];
  path: (kind: Kind, id: number) => string;
  body: (kind: Kind, id: number) => string | undefined;
}

function targets(config: string): Record<string, Target> {
  const page = JSON.stringify(Array.from({ length: 50 }, (_, i) => item(4242 + i, 1)));
  const peer = {
    path: (kind: Kind, id: number) => (kind === 'query' ? '/query' : `/records/${id}`),
    body: (kind: Kind, id: number) => (kind === 'query' ? JSON.stringify({ from: id }) : undefined),
  };
  return {
    sluice: {
      args: (port) => [
        '--conditions=@sluice/source',
        '--import',
        TSX,
        API_BIN,
        '--config',
        config,
        '--port',
        String(port),
      ],
      path: (kind, id) =>
        kind === 'query' ? '/v1/endpoints/items/query' : `/v1/endpoints/items/records/${id}`,
      body: (kind, id) =>
        kind === 'query'
          ? JSON.stringify({ $filter: { value: { $gte: id } }, $order_by: { value: 'asc' }, $limit: 50 })
          : undefined,
    },
    bare: { args: (port) => ['--import', TSX, PEERS, 'bare', String(port), page], ...peer },
    plain: { args: (port) => ['-e', PLAIN_SERVER, String(port), JSON.stringify(item(4242, 1))], ...peer },
  };
}

/** Sends `count` requests over `CONNECTIONS` keep-alive connections, ids spread over the table. */
async function send(port: number, target: Target, kind: Kind, count: number, offset: number): Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  const one = (i: number) =>
    new Promise<void>((resolve, reject) => {
      const id = 1 + ((i * 7919) % Math.floor(RECORDS * 0.9));
      const body = target.body(kind, id);
      const request = http.request(
        {
          host: '127.0.0.1',
          port,
          path: target.path(kind, id),
          method: body === undefined ? 'GET' : 'POST',
          agent,
          headers: body === undefined ? {} : { 'content-type': 'application/json' },
        },
        (response) => {
          response.resume();
          response.on('end', () =>
            response.statusCode === 200 ? resolve() : reject(new Error(`status ${response.statusCode}`)),
          );
        },
      );
      request.on('error', reject);
      request.end(body);
    });
  let next = 0;
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (next < count) await one(offset + next++);
    }),
  );
  agent.destroy();
}

/** The counted events of the dump callgrind wrote for `pid` (its `summary:` line), by event name. */
function summaryOf(dir: string, pid: number): Record<string, number> {
  const file = readdirSync(dir).find((f) => f.startsWith(`callgrind.${pid}.`) && !f.endsWith(`.${pid}`));
  if (file === undefined) throw new Error(`callgrind wrote no dump for ${pid}`);
  const text = readFileSync(join(dir, file), 'utf8');
  const events = /^events: (.+)$/m.exec(text)?.[1]?.split(' ') ?? [];
  const counts = /^summary: (.+)$/m.exec(text)?.[1]?.split(' ').map(Number) ?? [];
  return Object.fromEntries(events.map((event, i) => [event, counts[i] ?? 0]));
}

async function measure(name: string, target: Target, kind: Kind, dir: string): Promise<void> {
  const port = await freePort();
  const child = spawn(
    'valgrind',
    [
      '--tool=callgrind',
      '--instr-atstart=no',
      ...(process.env.CACHESIM ? ['--cache-sim=yes'] : []),
      // V8 writes the code it runs: valgrind must notice code changing on the heap and stacks.
      '--smc-check=all-non-file',
      `--callgrind-out-file=${join(dir, 'callgrind.%p')}`,
      process.execPath,
      ...target.args(port),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, SLUICE_LOG_LEVEL: 'info' } },
  );
  let output = '';
  child.stdout.on('data', (chunk) => {
    output += chunk;
  });
  child.stderr.on('data', (chunk) => {
    output += chunk;
  });
  try {
    // valgrind's own lines (`==pid== Command: …`) echo the command, which may hold the word itself.
    const listening = () =>
      output.split('\n').some((line) => !line.startsWith('==') && line.includes('listening'));
    while (!listening()) {
      if (child.exitCode !== null) throw new Error(`${name} exited before listening:\n${output}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await send(port, target, kind, WARMUP, 0);
    const pid = String(child.pid);
    execFileSync('callgrind_control', ['--instr=on', pid], { stdio: 'ignore' });
    await send(port, target, kind, REQUESTS, WARMUP);
    execFileSync('callgrind_control', ['--dump', pid], { stdio: 'ignore' });
    const counts = summaryOf(dir, child.pid!);
    const per = (event: string) => ((counts[event] ?? 0) / REQUESTS).toFixed(0).padStart(8);
    const caches = process.env.CACHESIM
      ? `  I1 misses ${per('I1mr')}  D1 misses ${per('D1mr')}  LL misses ${((counts.DLmr! + counts.DLmw!) / REQUESTS).toFixed(0).padStart(5)}`
      : '';
    console.log(`  ${name.padEnd(7)} ${kind.padEnd(7)} ${per('Ir')} instructions/request${caches}`);
  } finally {
    child.kill('SIGKILL');
  }
}

async function main(): Promise<void> {
  await using dir = await tempDir('sluice-api-instructions-');
  {
    await using manager = await openCacheManager(dir.path);
    const cache = await createItemsGeneration(manager, RECORDS);
    await manager.redirect('items', cache.name);
    await cache.close();
  }
  const config = await writeConfig(dir.path, { dataDir: dir.path, logLevel: 'warn', api: { port: 0 } });
  const all = targets(config);
  console.log(
    `instructions per request (callgrind): ${RECORDS} records, ${WARMUP} warm-up + ${REQUESTS} counted requests, ${CONNECTIONS} connections`,
  );
  for (const kind of KINDS)
    for (const name of TARGETS) {
      const target = all[name];
      if (target === undefined) throw new Error(`unknown target ${name} (sluice, bare, plain)`);
      await measure(name, target, kind, dir.path);
    }
}

await main();
