/**
 * Backplane benchmark: owner-query latency (owner found; nobody) next to a raw NATS request/reply round trip
 * (the limit), the direct-address strategy as a peer, and event fan-out latency to 1, 4 and 16 subscribers next
 * to raw NATS fan-out. Prints markdown tables with ratios.
 *
 * Run: pnpm --filter @sluice/backplane bench   (spawns a private nats-server; takes well under a minute)
 */
import { cpus } from 'node:os';
import { connect, Empty, type NatsConnection } from '@nats-io/transport-node';
import { snapshottingDone } from '@sluice/core';
import { startNatsServer } from '@sluice/testkit';
import Fastify from 'fastify';
import { directRoutes } from '../src/fastify.js';
import { createDirectBackplane, createNatsBackplane, type NatsBackplane } from '../src/index.js';

const QUERIES = Number(process.env.BENCH_QUERIES ?? 3_000);
const EVENTS = Number(process.env.BENCH_EVENTS ?? 600);
const WARMUP = 200;

interface Stats {
  p50: number;
  p99: number;
  mean: number;
}

function stats(samples: number[]): Stats {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { p50: at(0.5), p99: at(0.99), mean: sorted.reduce((s, v) => s + v, 0) / sorted.length };
}

async function measure(iterations: number, op: (i: number) => Promise<unknown>): Promise<Stats> {
  for (let i = 0; i < WARMUP; i++) await op(i);
  const samples: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const started = performance.now();
    await op(i);
    samples.push((performance.now() - started) * 1000);
  }
  return stats(samples);
}

/**
 * Measures several operations in interleaved rounds, so load from other processes on a shared machine hits them
 * all alike and the ratios stay meaningful.
 */
async function measureInterleaved<K extends string>(
  iterations: number,
  ops: Record<K, (i: number) => Promise<unknown>>,
  rounds = 10,
): Promise<Record<K, Stats>> {
  const names = Object.keys(ops) as K[];
  const samples = Object.fromEntries(names.map((n) => [n, [] as number[]])) as Record<K, number[]>;
  for (const name of names) for (let i = 0; i < WARMUP; i++) await ops[name](i);
  const perRound = Math.ceil(iterations / rounds);
  for (let round = 0; round < rounds; round++) {
    for (const name of names) {
      for (let j = 0; j < perRound; j++) {
        const i = round * perRound + j;
        const started = performance.now();
        await ops[name](i);
        samples[name].push((performance.now() - started) * 1000);
      }
    }
  }
  return Object.fromEntries(names.map((n) => [n, stats(samples[n])])) as Record<K, Stats>;
}

const us = (v: number) => `${v.toFixed(0)} µs`;
const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;

function expectStatus(answer: { status: string }, status: string): void {
  if (answer.status !== status) throw new Error(`expected ${status}, got ${JSON.stringify(answer)}`);
}

await using nats = await startNatsServer();
const rawServer: NatsConnection = await connect({ servers: nats.url });
const rawClient: NatsConnection = await connect({ servers: nats.url });
rawServer.subscribe('raw.echo', {
  callback: (_err, msg) => {
    msg.respond('{"ok":true}');
  },
});
await rawServer.flush();

const clusterName = 'bench';
const owner = await createNatsBackplane({ nats: nats.url, clusterName, nodeId: 'owner' });
const asker = await createNatsBackplane({ nats: nats.url, clusterName, nodeId: 'asker' });
await owner.serve('bench-transfer', {
  report: () => ({
    nodeId: 'owner',
    address: 'http://owner:7070',
    epoch: 3,
    progress: { read: 1000, written: 990 },
  }),
  async terminate() {},
});

// Direct-address peer: the same question over HTTP to a node serving the routes plugin (as production does).
const directOwner = createDirectBackplane({ nodeId: 'owner' });
const directAsker = createDirectBackplane({ nodeId: 'asker' });
await directOwner.serve('bench-transfer', {
  report: () => ({ nodeId: 'owner', address: 'http://owner:7070', epoch: 3 }),
  async terminate() {},
});
const http = Fastify();
await http.register(directRoutes, { backplane: directOwner });
const ownerAddress = await http.listen({ port: 0, host: '127.0.0.1' });

const directQueries = Math.min(QUERIES, 1_000);
const { raw, rawNoResponders, found, nobody } = await measureInterleaved(QUERIES, {
  raw: () => rawClient.request('raw.echo', Empty, { timeout: 5_000 }),
  rawNoResponders: () =>
    rawClient.request('raw.nobody', Empty, { timeout: 5_000 }).then(
      () => {
        throw new Error('unexpected responder');
      },
      () => undefined,
    ),
  found: async () => expectStatus(await asker.whoRuns('bench-transfer', { timeoutMs: 5_000 }), 'owner'),
  nobody: async (i) => expectStatus(await asker.whoRuns(`absent-${i}`, { timeoutMs: 5_000 }), 'nobody'),
});
const directFound = await measure(directQueries, async () =>
  expectStatus(await directAsker.whoRuns('bench-transfer', { timeoutMs: 5_000, ownerAddress }), 'owner'),
);

console.log('### Owner query latency\n');
console.log(
  `${QUERIES} sequential queries per NATS row, interleaved in 10 rounds so machine noise hits all rows alike; ${directQueries} for HTTP; ${WARMUP} warm-up each; one process, private nats-server on loopback.\n`,
);
console.log('| operation | p50 | p99 | p50 vs raw NATS request/reply |');
console.log('|---|---|---|---|');
const row = (name: string, s: Stats, base: Stats) =>
  console.log(`| ${name} | ${us(s.p50)} | ${us(s.p99)} | ${ratio(s.p50, base.p50)} |`);
row('raw NATS request/reply (limit)', raw, raw);
row('raw NATS request, no responders', rawNoResponders, raw);
row('**NATS backplane `whoRuns`: owner found**', found, raw);
row('**NATS backplane `whoRuns`: nobody**', nobody, raw);
row('direct-address `whoRuns` over HTTP (peer): owner found', directFound, raw);
console.log(
  `\nNobody vs raw no-responders: ${ratio(nobody.p50, rawNoResponders.p50)} (p50), ${ratio(nobody.p99, rawNoResponders.p99)} (p99). ` +
    `Owner found vs direct HTTP: ${ratio(found.p50, directFound.p50)}.\n`,
);

// Fan-out: publish one event, wait until every subscriber (each on its own connection) has it, repeat.
async function fanOut(subscribers: number): Promise<{ backplane: Stats; raw: Stats }> {
  const nodes: NatsBackplane[] = [];
  let pending = 0;
  let wake: (() => void) | null = null;
  const received = () => {
    pending -= 1;
    if (pending === 0) wake?.();
  };
  for (let i = 0; i < subscribers; i++) {
    const node = await createNatsBackplane({
      nats: nats.url,
      clusterName: `fan${subscribers}`,
      nodeId: `s${i}`,
    });
    await node.subscribe(received);
    nodes.push(node);
  }
  const publisher = await createNatsBackplane({
    nats: nats.url,
    clusterName: `fan${subscribers}`,
    nodeId: 'pub',
  });
  const event = snapshottingDone({ endpoint: 'items', cache: 'items-2', source: 'file' });
  const rawConns: NatsConnection[] = [];
  for (let i = 0; i < subscribers; i++) {
    const nc = await connect({ servers: nats.url });
    nc.subscribe(`rawfan${subscribers}`, { callback: () => received() });
    await nc.flush();
    rawConns.push(nc);
  }
  const payload = JSON.stringify(event);
  const waitAll = () =>
    new Promise<void>((resolve) => {
      wake = resolve;
    });
  const result = await measureInterleaved(EVENTS, {
    backplane: async () => {
      pending = subscribers;
      const all = waitAll();
      await publisher.publish(event);
      await all;
    },
    raw: async () => {
      pending = subscribers;
      const all = waitAll();
      rawClient.publish(`rawfan${subscribers}`, payload);
      await all;
    },
  });
  await Promise.all([...nodes.map((n) => n.close()), publisher.close(), ...rawConns.map((c) => c.close())]);
  return result;
}

console.log('### Event fan-out latency\n');
console.log(
  `Time from \`publish()\` until every subscriber's handler has the event; ${EVENTS} events per row (interleaved with raw), ${WARMUP} warm-up, each subscriber on its own connection; the backplane's \`publish()\` also waits for the server to confirm (a flush).\n`,
);
console.log('| subscribers | backplane p50 | backplane p99 | raw NATS p50 | raw NATS p99 | p50 ratio |');
console.log('|---|---|---|---|---|---|');
for (const n of [1, 4, 16]) {
  const r = await fanOut(n);
  console.log(
    `| ${n} | ${us(r.backplane.p50)} | ${us(r.backplane.p99)} | ${us(r.raw.p50)} | ${us(r.raw.p99)} | ${ratio(r.backplane.p50, r.raw.p50)} |`,
  );
}
console.log(`\nMachine: ${cpus().length} cores (${cpus()[0]?.model ?? 'cpu'}), Node ${process.version}.`);

await Promise.all([
  owner.close(),
  asker.close(),
  directOwner.close(),
  directAsker.close(),
  rawServer.close(),
  rawClient.close(),
]);
await http.close();
