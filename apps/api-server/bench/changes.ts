/**
 * Change-feed benchmark: commit → delivery latency (p50/p99) at 500 changes/s for 1, 100 and 1 000 subscribers
 * of one api-server process, next to (a) a bare node:http SSE server pushing the same events to the same number of
 * clients (the limit of SSE fan-out from one Node process here) and (b) raw NATS fan-out (a publisher process,
 * nats-server, one connection per subscriber). Then the memory of an idle subscriber (api-server RSS delta).
 *
 *   pnpm --filter @sluice/api-server bench changes     (DURATION=6 SUBSCRIBERS=1,100,1000 SAMPLED=50 to change;
 *                                                       CPU_PROF=<dir> profiles the api-server of the Sluice runs)
 *
 * Every server is its own process; the subscribers live in this one (all of them read every byte; the first
 * SAMPLED of them also parse each event's `value`, the instant it was produced, to measure latency). Sluice's
 * writer is a separate process committing 10 upserts every 20 ms; the peers produce the same.
 */

import { readFileSync, writeFileSync } from 'node:fs';
import { type IncomingMessage, request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { freePort, spawnTs, tempDir } from '@sluice/testkit';
import { startFeedWriter } from '../test/feed-harness.js';
import { spawnApiServer, writeConfig } from '../test/helpers.js';

const DURATION_S = Number(process.env.DURATION ?? 6);
const COUNTS = (process.env.SUBSCRIBERS ?? '1,100,1000').split(',').map(Number);
const SAMPLED = Number(process.env.SAMPLED ?? 50);
const PER_COMMIT = 10;
const EVERY_MS = 20; // 10 × 50 = 500 changes/s
const WARMUP_MS = 1_000;
const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const PEERS = fileURLToPath(new URL('./change-peers.ts', import.meta.url));

interface Samples {
  latencies: number[];
  startAt: number;
  /** (commit epoch, receive instant) of every `commit` event received (Sluice only). */
  commits?: Array<[number, number]>;
}

/** Reads an SSE response; when `samples` is given, records now − value for every event after the warm-up. */
function consume(res: IncomingMessage, samples: Samples | null): void {
  res.setEncoding('utf8');
  let tail = '';
  res.on('data', (chunk: string) => {
    if (!samples) return;
    const text = tail + chunk;
    const end = text.lastIndexOf('\n\n');
    if (end < 0) {
      tail = text;
      return;
    }
    tail = text.slice(end + 2);
    const now = Date.now();
    if (now < samples.startAt) return;
    const events = text.slice(0, end);
    for (const match of events.matchAll(/"value":(\d+)/g)) samples.latencies.push(now - Number(match[1]));
    if (samples.commits)
      for (const match of events.matchAll(/event: commit\ndata: \{.*?"epoch":(\d+)\}/g))
        samples.commits.push([Number(match[1]), now]);
  });
}

function openSse(url: string, samples: Samples | null): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers: { accept: 'text/event-stream' } }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`HTTP ${res.statusCode}`));
      consume(res, samples);
      resolve(res);
    });
    req.on('error', reject);
    req.end();
  });
}

async function openMany(url: string, n: number, samples: Samples): Promise<IncomingMessage[]> {
  const out: IncomingMessage[] = [];
  for (let i = 0; i < n; i += 100)
    out.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(100, n - i) }, (_, k) =>
          openSse(url, i + k < SAMPLED ? samples : null),
        ),
      )),
    );
  return out;
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

interface Figures {
  p50: number;
  p99: number;
  events: number;
}

const figures = (s: Samples): Figures => ({
  p50: percentile(s.latencies, 50),
  p99: percentile(s.latencies, 99),
  events: s.latencies.length,
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function rssKiB(pid: number): number {
  const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(match?.[1] ?? Number.NaN);
}

/**
 * Every subscriber of the benchmark connects from this process's one address: one client to the api-server, which
 * would otherwise refuse it past `api.changes.maxPerClient` (default 100).
 */
const ONE_CLIENT_FEEDS = { changes: { maxPerClient: 10_000 } };

async function sluiceRun(n: number): Promise<Figures & { commitP50: number; commitP99: number }> {
  await using dir = await tempDir('sluice-bench-changes-');
  await using writer = await startFeedWriter(dir, { initial: [] });
  const config = await writeConfig(dir.path, {
    dataDir: writer.root,
    logLevel: 'warn',
    api: ONE_CLIENT_FEEDS,
  });
  await using api = await spawnApiServerQuiet(config);
  const samples: Samples = { latencies: [], startAt: Number.POSITIVE_INFINITY, commits: [] };
  const subscribers = await openMany(`${api.url}/v1/endpoints/items/changes`, n, samples);
  await sleep(500);
  samples.startAt = Date.now() + WARMUP_MS;
  await writer.run({
    op: 'stream',
    commits: Math.round((DURATION_S * 1000) / EVERY_MS),
    perCommit: PER_COMMIT,
    everyMs: EVERY_MS,
    from: 1,
    gen: 1,
    cycle: 1000,
  });
  await sleep(300);
  for (const s of subscribers) s.destroy();
  // Commit → delivery: the writer's instant after each commit returned (same machine clock) to each receipt.
  const committedAt = new Map<number, number>();
  for (const line of writer.child.lines) {
    const match = /^COMMITTED (\d+) (\d+)/.exec(line);
    if (match) committedAt.set(Number(match[1]), Number(match[2]));
  }
  const commitLatencies = (samples.commits ?? []).flatMap(([epoch, at]) => {
    const committed = committedAt.get(epoch);
    return committed === undefined ? [] : [at - committed];
  });
  return {
    ...figures(samples),
    commitP50: percentile(commitLatencies, 50),
    commitP99: percentile(commitLatencies, 99),
  };
}

/** `spawnApiServer` waits for its "listening" info line: keep info logs, the server only logs at start. */
async function spawnApiServerQuiet(configPath: string) {
  const text = readFileSync(configPath, 'utf8').replace(/logLevel: warn\n?/, '');
  writeFileSync(configPath, text);
  // CPU_PROF=<dir>: the api-server of the Sluice runs writes a V8 CPU profile there (scripts/profile-shares.mjs).
  const profile = process.env.CPU_PROF;
  return spawnApiServer(configPath, {}, profile ? ['--cpu-prof', `--cpu-prof-dir=${profile}`] : []);
}

async function bareRun(n: number): Promise<Figures> {
  const port = await freePort();
  await using peer = spawnTs(PEERS, ['sse', String(port), String(PER_COMMIT), String(EVERY_MS)]);
  await peer.waitForLine(/peer ready/, 30_000);
  const samples: Samples = { latencies: [], startAt: Number.POSITIVE_INFINITY };
  const subscribers = await openMany(`http://127.0.0.1:${port}/`, n, samples);
  await sleep(500);
  samples.startAt = Date.now() + WARMUP_MS;
  peer.kill('SIGUSR2');
  await sleep(DURATION_S * 1000);
  for (const s of subscribers) s.destroy();
  return figures(samples);
}

async function natsRun(n: number): Promise<Figures> {
  const subject = `bench.changes.${process.pid}.${n}`;
  const samples: Samples = { latencies: [], startAt: Number.POSITIVE_INFINITY };
  const connections: NatsConnection[] = [];
  for (let i = 0; i < n; i += 50)
    connections.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(50, n - i) }, () => connect({ servers: NATS_URL })),
      )),
    );
  connections.forEach((nc, i) => {
    const sampled = i < SAMPLED;
    nc.subscribe(subject, {
      callback: (_err, msg) => {
        if (!sampled) return;
        const now = Date.now();
        if (now < samples.startAt) return;
        const match = /"value":(\d+)/.exec(msg.string());
        if (match) samples.latencies.push(now - Number(match[1]));
      },
    });
  });
  await Promise.all(connections.map((nc) => nc.flush()));
  await using peer = spawnTs(PEERS, ['nats', NATS_URL, subject, String(PER_COMMIT), String(EVERY_MS)]);
  await peer.waitForLine(/peer ready/, 30_000);
  samples.startAt = Date.now() + WARMUP_MS;
  peer.kill('SIGUSR2');
  await sleep(DURATION_S * 1000);
  await Promise.all(connections.map((nc) => nc.close()));
  return figures(samples);
}

async function idleMemory(n: number): Promise<{ perSubscriberKiB: number; before: number; after: number }> {
  await using dir = await tempDir('sluice-bench-idle-');
  await using writer = await startFeedWriter(dir, { initial: [] });
  const config = await writeConfig(dir.path, { dataDir: writer.root, api: ONE_CLIENT_FEEDS });
  await using api = await spawnApiServer(config);
  const none: Samples = { latencies: [], startAt: Number.POSITIVE_INFINITY };
  const warm = await openMany(`${api.url}/v1/endpoints/items/changes`, 10, none);
  await sleep(1_000);
  const before = rssKiB(api.child.pid);
  const idle = await openMany(`${api.url}/v1/endpoints/items/changes`, n, none);
  await sleep(2_000);
  const after = rssKiB(api.child.pid);
  for (const s of [...warm, ...idle]) s.destroy();
  return { perSubscriberKiB: (after - before) / n, before, after };
}

const fmt = (f: Figures) => `${f.p50} / ${f.p99}`;

async function main(): Promise<void> {
  console.log(
    `change feeds: ${PER_COMMIT * (1000 / EVERY_MS)} changes/s (${PER_COMMIT} per commit every ${EVERY_MS} ms), ${DURATION_S} s per run, latency of the first ${SAMPLED} subscribers (ms, commit → delivery)`,
  );
  const rows: string[] = [];
  for (const n of COUNTS) {
    const sluice = await sluiceRun(n);
    const bare = await bareRun(n);
    const nats = await natsRun(n);
    const row = `| ${n} | ${sluice.commitP50} / ${sluice.commitP99} | ${fmt(sluice)} | ${fmt(bare)} | ${fmt(nats)} | ${(sluice.p50 / Math.max(1, bare.p50)).toFixed(2)} / ${(sluice.p99 / Math.max(1, bare.p99)).toFixed(2)} | ${sluice.events} / ${bare.events} / ${nats.events} |`;
    console.log(row);
    rows.push(row);
  }
  const memory = await idleMemory(1000);
  console.log('');
  console.log(
    '| subscribers | sluice commit → delivery p50 / p99 ms | sluice produce → delivery p50 / p99 ms | bare SSE (limit) p50 / p99 ms | raw NATS p50 / p99 ms | sluice ÷ bare (p50 / p99) | samples (sluice / bare / nats) |',
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const row of rows) console.log(row);
  console.log('');
  console.log(
    `idle subscriber memory: ${memory.perSubscriberKiB.toFixed(1)} KiB each (api-server RSS ${memory.before} → ${memory.after} KiB with 1000 more idle subscribers)`,
  );
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
