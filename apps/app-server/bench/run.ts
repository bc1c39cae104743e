/**
 * app-server benchmark (a command, not a test):
 *  1. submits/s over HTTP under autocannon — idempotent with new ids (insert + claim + run a 1-record
 *     transfer), idempotent duplicates of a finished id (the stored outcome), fire-and-forget — on the
 *     embedded defaults (SQLite) and on PostgreSQL + NATS, next to a bare fastify route that parses the same
 *     body (the ceiling of an HTTP JSON server on this machine), measured again right before each workload;
 *  2. takeover time after SIGKILL of the owner: asking NATS on a resubmit vs waiting for the lease (sweeper).
 * Every server is its own process; autocannon runs in this one.
 *
 *   pnpm --filter @sluice/app-server bench        (DURATION=5 CONNECTIONS=16 ROUNDS=3 to change;
 *   ONLY=postgres to run one part; CPU_PROF=<dir> to profile the PostgreSQL node)
 */
import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openStore } from '@sluice/store';
import { createTestDatabase, freePort, spawnTs, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import autocannon from 'autocannon';
import {
  call,
  fileTransfer,
  type NodeProcess,
  startNodeProcess,
  waitForState,
  writeRecords,
} from '../test/helpers.js';

const DURATION = Number(process.env.DURATION ?? 5);
const CONNECTIONS = Number(process.env.CONNECTIONS ?? 16);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const BARE = new URL('./bare-server.ts', import.meta.url).pathname;
const PG_PEER = new URL('./pg-peer-server.ts', import.meta.url).pathname;
/** `ONLY=postgres` (or `sqlite`, `takeover`, comma-separated) runs only those parts. */
const ONLY = new Set((process.env.ONLY ?? 'sqlite,postgres,takeover').split(','));

interface Figures {
  label: string;
  rps: number;
  /** Requests answered 2xx in the whole run. */
  ok: number;
  p50: number;
  p99: number;
  non2xx: number;
  /** The bare route's req/s measured just before this workload (the machine's load drifts). */
  peer?: number;
}

const rows: Figures[] = [];
/**
 * Sluice against the route a user would write instead (fastify + pg), measured back to back, with the CPU each
 * process spent per answered request (Sluice's until its accepted transfers finished: a submit's whole cost).
 */
const peerRows: { label: string; sluice: Figures; peer: Figures; sluiceCpuUs: number; peerCpuUs: number }[] =
  [];

/** CPU time (user + system, µs) a process has used so far, from /proc (clock ticks of 10 ms). */
function cpuMicros(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the parenthesised command name: utime and stime are the 12th and 13th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100;
}

/** The monotonic clock in µs — the clock of `node --cpu-prof` sample times, so windows can be cut from a profile. */
const monotonicMicros = () => Number(process.hrtime.bigint() / 1000n);

async function load(label: string, url: string, body: (seq: number) => object): Promise<Figures> {
  let seq = 0;
  const result = await autocannon({
    url,
    connections: CONNECTIONS,
    duration: DURATION,
    pipelining: 1,
    requests: [
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        setupRequest: (request) => ({ ...request, body: JSON.stringify(body(seq++)) }),
      },
    ],
  });
  const figures: Figures = {
    label,
    rps: Math.round(result.requests.average),
    ok: result['2xx'],
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
  };
  rows.push(figures);
  console.error(`  ${label}: ${figures.rps} req/s`);
  return figures;
}

async function main() {
  await using dir = await tempDir('sluice-app-bench-');
  const files = join(dir.path, 'files');
  await mkdir(files, { recursive: true });
  const source = join(files, 'one.jsonl');
  await writeFile(source, '{"id":1,"value":1}\n');
  const destination = join(files, 'out.jsonl');
  const transfers = { queueSize: 100_000, maxConcurrentTransfers: 16, fireAndForgetConcurrency: 16 };
  const transfer = (id: string) => fileTransfer(id, source, destination);

  // The peer: a bare fastify route, kept running and measured again right before every workload, so each
  // ratio compares two runs taken under the same machine load.
  const barePort = await freePort();
  await using bare = spawnTs(BARE, [String(barePort)]);
  await bare.waitForLine(/bare server ready/);
  const bareUrl = `http://127.0.0.1:${barePort}/bare`;
  const paired = async (label: string, url: string, body: (seq: number) => object) => {
    const peer = await load(`bare fastify route (before ${label})`, bareUrl, (i) => transfer(`bare-${i}`));
    rows.pop();
    const figures = await load(label, url, body);
    figures.peer = peer.rps;
  };

  const runSubmits = async (kind: string, node: NodeProcess) => {
    const url = `${node.url}/v1/transfers`;
    await paired(`${kind}: idempotent, new ids`, url, (i) => transfer(`${kind}-new-${i}`));
    // Let the accepted transfers finish before the next workload measures anything.
    await waitFor(
      async () =>
        (await call(`${node.url}/v1/transfers?state=IN_PROGRESS&limit=1`)).body.records.length === 0,
      { timeoutMs: 300_000, intervalMs: 250, what: 'the accepted transfers to finish' },
    );
    const dup = transfer(`${kind}-dup`);
    await call(url, { json: dup });
    await waitForState(node.url, `${kind}-dup`, 'COMPLETED', 120_000);
    await paired(`${kind}: idempotent, duplicate id`, url, () => dup);
    await paired(`${kind}: fire-and-forget`, url, (i) => ({
      ...transfer(`${kind}-ff-${i}`),
      mode: 'fire-and-forget',
    }));
    await waitFor(
      async () =>
        /sluice_transfers\{state="fire_and_forget"\} 0\b/.test((await call(`${node.url}/metrics`)).body),
      { timeoutMs: 300_000, intervalMs: 250, what: 'the fire-and-forget backlog to drain' },
    );
  };

  if (ONLY.has('sqlite')) {
    console.error('embedded (SQLite, single-node backplane)…');
    await using node = await startNodeProcess({
      nodeId: 'bench',
      dir: join(dir.path, 'embedded'),
      store: `sqlite:${join(dir.path, 'embedded', 'store.db')}`,
      roots: [files],
      transfers,
      logLevel: 'warn',
    });
    await runSubmits('sqlite', node);
  }

  await using db = await createTestDatabase('sluice_app_bench');
  await using nats = await startNatsServer();
  if (ONLY.has('postgres')) {
    console.error('cluster node (PostgreSQL + NATS)…');
    await using node = await startNodeProcess({
      nodeId: 'pg1',
      dir: join(dir.path, 'pg1'),
      store: db.url,
      nats: nats.url,
      roots: [files],
      transfers,
      logLevel: 'warn',
      // CPU_PROF=<dir> writes the node's CPU profile there (node --cpu-prof) when it stops.
      nodeArgs: process.env.CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.CPU_PROF}`] : [],
    });
    await runSubmits('postgres', node);
    const peerPort = await freePort();
    await using peer = spawnTs(PG_PEER, [String(peerPort), db.url]);
    await peer.waitForLine(/pg peer ready/);
    const nodePid = node.child.pid;
    const peerPid = peer.pid;
    /** The new-id rounds' time windows (monotonic µs), for cutting them out of the node's CPU profile. */
    const windows: { round: number; from: number; to: number; requests: number }[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const peerCpuBefore = cpuMicros(peerPid);
      const peerFigures = await load(
        `fastify + pg INSERT … ON CONFLICT (round ${round + 1})`,
        `http://127.0.0.1:${peerPort}/transfers`,
        (i) => transfer(`peer-${round}-${i}`),
      );
      const peerCpuUs = (cpuMicros(peerPid) - peerCpuBefore) / Math.max(1, peerFigures.ok);
      const nodeCpuBefore = cpuMicros(nodePid);
      const from = monotonicMicros();
      const sluice = await load(
        `postgres: idempotent, new ids (round ${round + 1})`,
        `${node.url}/v1/transfers`,
        (i) => transfer(`postgres-vs-peer-${round}-${i}`),
      );
      rows.splice(rows.length - 2, 2);
      await waitFor(
        async () =>
          (await call(`${node.url}/v1/transfers?state=IN_PROGRESS&limit=1`)).body.records.length === 0,
        { timeoutMs: 300_000, intervalMs: 250, what: 'the accepted transfers to finish' },
      );
      windows.push({ round: round + 1, from, to: monotonicMicros(), requests: sluice.ok });
      const sluiceCpuUs = (cpuMicros(nodePid) - nodeCpuBefore) / Math.max(1, sluice.ok);
      peerRows.push({ label: `round ${round + 1}`, sluice, peer: peerFigures, sluiceCpuUs, peerCpuUs });
    }
    if (process.env.CPU_PROF)
      await writeFile(join(process.env.CPU_PROF, 'new-id-rounds.json'), JSON.stringify(windows, null, 2));
    // A graceful stop, so that node writes its CPU profile (dispose would SIGKILL it).
    if (process.env.CPU_PROF) await node.child.stop('SIGTERM');
  }

  printSubmits();
  if (!ONLY.has('takeover')) return;
  console.error('takeover after SIGKILL…');
  const big = await writeRecords(join(files, 'big.jsonl'), 20_000);
  const spec = (nodeId: string) => ({
    nodeId,
    dir: join(dir.path, nodeId),
    store: db.url,
    nats: nats.url,
    roots: [files],
    transfers: { leaseMs: 2_000, heartbeatMs: 300, sweepIntervalMs: 250, ownerWaitMs: 500 },
  });
  await using store = await openStore(db.url);
  const survivor = await startNodeProcess(spec('tb'));
  const viaNats: number[] = [];
  const viaLease: number[] = [];
  try {
    for (let round = 0; round < ROUNDS * 2; round++) {
      const lease = round % 2 === 1;
      const victim = await startNodeProcess(spec('ta'));
      const id = `takeover-${round}`;
      const body = fileTransfer(id, big, join(files, `${id}.jsonl`), 2_000);
      const created = await call(`${victim.url}/v1/transfers`, { json: body });
      if (created.status !== 201) throw new Error(`submit failed: ${JSON.stringify(created.body)}`);
      await waitFor(async () => (await store.get(id))?.checkpoint, { timeoutMs: 20_000 });
      await victim.child.stop('SIGKILL');
      const killedAt = performance.now();
      if (lease) {
        await waitFor(async () => (await store.get(id))?.ownerNodeId === 'tb', {
          timeoutMs: 20_000,
          intervalMs: 10,
        });
        viaLease.push(performance.now() - killedAt);
      } else {
        const reply = await call(`${survivor.url}/v1/transfers`, { json: body });
        if (reply.status !== 202 || !reply.body.resumed)
          throw new Error(`no takeover: ${JSON.stringify(reply.body)}`);
        viaNats.push(performance.now() - killedAt);
      }
      await call(`${survivor.url}/v1/transfers/${id}/terminate`, { method: 'POST' });
    }
  } finally {
    await survivor.child.stop('SIGKILL');
  }

  const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;
  console.log(
    `\n### takeover after SIGKILL of the owner (${ROUNDS} rounds each, lease 2000 ms, sweep 250 ms)\n`,
  );
  console.log('| strategy | median ms | all (ms) |');
  console.log('|---|---:|---|');
  console.log(
    `| resubmit, NATS answers "nobody" | ${median(viaNats).toFixed(0)} | ${viaNats.map((v) => v.toFixed(0)).join(', ')} |`,
  );
  console.log(
    `| nobody resubmits: lease expiry + sweeper | ${median(viaLease).toFixed(0)} | ${viaLease.map((v) => v.toFixed(0)).join(', ')} |`,
  );
  console.log(`\nratio lease-only / NATS: ${(median(viaLease) / Math.max(1, median(viaNats))).toFixed(1)}×`);
}

function printSubmits() {
  console.log(`\n### app-server submits (autocannon, ${CONNECTIONS} connections, ${DURATION} s each)\n`);
  console.log('| workload | req/s | p50 ms | p99 ms | non-2xx | bare fastify just before (req/s) | ratio |');
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const row of rows)
    console.log(
      `| ${row.label} | ${row.rps} | ${row.p50} | ${row.p99} | ${row.non2xx} | ${row.peer ?? '-'} | ${row.peer ? (row.rps / row.peer).toFixed(3) : '-'} |`,
    );
  if (peerRows.length === 0) return;
  console.log(
    '\n### idempotent new-id submits on PostgreSQL vs the route a user would write (fastify + pg `INSERT … ON CONFLICT`, no transfer run)\n',
  );
  console.log(
    '| round | Sluice req/s | p50 ms | node CPU µs/req (until its transfers finished) | peer req/s | peer p50 ms | peer CPU µs/req | ratio |',
  );
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const { label, sluice, peer, sluiceCpuUs, peerCpuUs } of peerRows)
    console.log(
      `| ${label} | ${sluice.rps} | ${sluice.p50} | ${sluiceCpuUs.toFixed(0)} | ${peer.rps} | ${peer.p50} | ${peerCpuUs.toFixed(0)} | ${(sluice.rps / peer.rps).toFixed(3)} |`,
    );
}

await main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
