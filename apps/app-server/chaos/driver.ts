/**
 * The chaos run of the data plane, driven only through public contracts (config file, CLI, control API): three
 * app-server nodes on one PostgreSQL store and a private nats-server, N idempotent transfers to file, PostgreSQL and
 * JetStream destinations, while faults are injected and transfers are resubmitted and terminated at random. Then,
 * with every node back up, it checks what issue 13 promises: every transfer reaches a final state on its own, every
 * COMPLETED destination holds each source record exactly once (the last value winning), and every TERMINATED one
 * stopped growing when TERMINATED was reported.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTestDatabase, sleep, startNatsServer } from '@sluice/testkit';
import { CHAOS_TRANSFERS, Cluster, transferNodeYaml } from './cluster.js';
import { Destinations } from './destinations.js';
import { codeVersion, logsAbout } from './evidence.js';
import { FaultInjector } from './faults.js';
import { type ChaosOptions, Rng } from './options.js';
import { Requests } from './requests.js';
import { planTransfers, writeSources } from './workload.js';

export interface Violation {
  kind: string;
  transfer: string | null;
  detail: string;
  evidence: string[];
}

export interface ChaosSummary {
  seed: number;
  startedAt: string;
  /** The commit the nodes ran (and whether the work tree differed). */
  code: string;
  transfers: number;
  seconds: number;
  /** Final (or last seen) state → number of transfers. */
  states: Record<string, number>;
  counts: {
    submits: number;
    resubmits: number;
    terminatesSent: number;
    terminatesReported: number;
    pauses: number;
    kills: number;
    gracefulStops: number;
    restarts: number;
    natsRestarts: number;
    nodeCrashes: number;
  };
  violations: Violation[];
  /** Not violations of the promise, but worth an owner's look (FAILED transfers and their errors). */
  notes: string[];
  dir: string;
  durationMs: number;
}

export async function runChaos(
  options: ChaosOptions,
  progress: (line: string) => void = () => {},
): Promise<ChaosSummary> {
  const started = Date.now();
  const code = codeVersion();
  const rel = (at = Date.now()) => `+${((at - started) / 1000).toFixed(1)}s`;
  const rng = new Rng(options.seed);
  const violations: Violation[] = [];
  const notes: string[] = [];
  const dir = await mkdtemp(join(tmpdir(), 'sluice-chaos-'));
  const timeline: string[] = [];
  const event = (message: string) => {
    timeline.push(`${rel()} ${message}`);
    progress(`${rel()} ${message}`);
  };
  const violate = (kind: string, transfer: string | null, detail: string, evidence: string[] = []) => {
    violations.push({ kind, transfer, detail, evidence });
    progress(`${rel()} VIOLATION ${kind}${transfer ? ` ${transfer}` : ''}: ${detail}`);
  };
  let nodeCrashes = 0;
  const failedStart = (message: string) => {
    notes.push(`failed start (retried): ${message.replace(/\s+/g, ' ').slice(0, 300)}`);
    progress(`${rel()} failed start (retried): ${message.split('\n').slice(0, 2).join(' ')}`);
  };

  await using storeDb = await createTestDatabase('sluice_chaos_store');
  await using destDb = await createTestDatabase('sluice_chaos_dest');
  await using nats = await startNatsServer();
  const fileRoot = join(dir, 'files');
  const sources = await writeSources(join(fileRoot, 'in'), rng.fork(1));
  const specs = planTransfers(options.transfers, sources, join(fileRoot, 'out'), rng.fork(2));
  await using destinations = await Destinations.prepare(destDb.url, nats.port, specs);
  let running = true;
  let cluster: Cluster | null = null;
  const shared = { storeUrl: storeDb.url, natsUrl: nats.url, destUrl: destDb.url, fileRoot };
  cluster = await Cluster.create({
    dir: join(dir, 'nodes'),
    config: (node) => transferNodeYaml(shared, node),
    bin: options.bin,
    nodes: 3,
    started,
    onUnexpectedExit: (node, how, tail) => {
      nodeCrashes += 1;
      violate('node crashed', null, `${node.id} life ${node.life} exited on its own (${how})`, tail);
      // It comes back like any crashed member would be restarted by its supervisor.
      if (running) void sleep(1_000).then(() => cluster?.startRetrying(node, failedStart).catch(() => {}));
    },
  });
  await using _cluster = cluster;
  progress(
    `seed ${options.seed}: ${options.transfers} transfers, ${options.seconds} s of faults, run dir ${dir}`,
  );
  await Promise.all(cluster.nodes.map((n) => cluster.start(n)));
  progress(`${rel()} 3 nodes up (${cluster.nodes.map((n) => `${n.id}=${n.url}`).join(', ')})`);

  const chaosRng = rng.fork(3);
  const requests = new Requests(specs, cluster, destinations, rng.fork(4), {
    rel,
    violate,
    note: (message) => notes.push(message),
  });
  const requestRng = rng.fork(5);
  const tracked = requests.tracked;

  // Submissions are spread over the first two thirds of the fault window; each is retried until a node accepts it.
  const chaosEnd = Date.now() + options.seconds * 1_000;
  const window = options.seconds * 1_000 * (2 / 3);
  const submitters = specs.map(async (spec, i) => {
    const t = tracked.get(spec.id)!;
    await sleep((window * i) / Math.max(1, specs.length) + requestRng.int(0, 300));
    await requests.submitUntilAccepted(t);
    // About one in six is terminated (by position, so even a small run terminates some).
    if (i % 6 === 4) {
      await sleep(requestRng.int(200, 6_000));
      if (running) await requests.terminate(t);
    }
  });
  const resubmitter = (async () => {
    while (running) {
      await sleep(requestRng.int(150, 500));
      const open = requests.open().filter((t) => t.accepted);
      if (open.length > 0) void requests.submit(requestRng.pick(open), true);
    }
  })();
  const poller = (async () => {
    while (running) {
      await requests.poll();
      await sleep(1_000);
    }
  })();

  const faults = new FaultInjector(cluster, nats, chaosRng, {
    event,
    problem: (kind, detail, evidence) => violate(kind, null, detail, evidence),
    failedStart,
  });
  await faults.run(chaosEnd, options.calm);
  running = false;
  await resubmitter;
  await poller;

  // Heal: every node up and running, nats-server up. From here on the cluster has to finish on its own.
  if (!nats.running) await nats.start();
  await cluster.heal(failedStart);
  event('healed: all nodes up, nats-server up');
  await Promise.all(submitters);
  const settleDeadline = Date.now() + options.settleSeconds * 1_000;
  while (Date.now() < settleDeadline) {
    await requests.poll();
    if (requests.open().length === 0) break;
    await sleep(1_000);
  }
  event(`settled: ${requests.open().length} not final`);
  // A stale writer of a TERMINATED transfer would show up after its lease at the latest.
  await sleep(CHAOS_TRANSFERS.leaseMs * 2);
  await requests.poll();

  for (const t of tracked.values()) {
    if (t.final === null) {
      const r = t.record;
      violate(
        'not final',
        t.spec.id,
        `still ${r?.state ?? 'unknown'} ${options.settleSeconds} s after every node was back: owner=${r?.owner?.nodeId ?? '-'} epoch=${r?.epoch} lease=${r?.leaseExpiresAt} updated=${r?.updatedAt}`,
      );
      continue;
    }
    if (t.final === 'COMPLETED') {
      const problems = await destinations
        .verifyCompleted(t.spec)
        .catch((err: Error) => [`check failed: ${err.message}`]);
      if (problems.length > 0)
        violate(`not exactly once (${t.spec.kind})`, t.spec.id, problems.join('\n    '));
    } else if (t.final === 'TERMINATED') {
      const end = await destinations.sample(t.spec).catch((err: Error) => `unreadable: ${err.message}`);
      if (t.terminatedSample && t.terminatedSample.sample !== end)
        violate(
          `grew after TERMINATED (${t.spec.kind})`,
          t.spec.id,
          `${t.terminatedSample.sample} when TERMINATED was reported (${t.terminatedSample.how}, ${rel(t.terminatedSample.at)}), ${end} at the end`,
        );
    } else if (t.final === 'FAILED')
      notes.push(`${t.spec.id} FAILED: ${JSON.stringify(t.record?.error).slice(0, 300)}`);
  }

  // Evidence: the driver's own requests for the transfer and every node's log lines that name it.
  for (const v of violations) {
    if (!v.transfer) continue;
    const t = tracked.get(v.transfer);
    if (t) v.evidence.push(...t.events.slice(-12).map((e) => `driver ${e}`));
    v.evidence.push(...logsAbout(cluster.nodes, v.transfer, started).slice(-25));
  }

  const states: Record<string, number> = {};
  for (const t of tracked.values()) {
    const state = t.final ?? `not final (${t.record?.state ?? 'unknown'})`;
    states[state] = (states[state] ?? 0) + 1;
  }
  const summary: ChaosSummary = {
    seed: options.seed,
    startedAt: new Date(started).toISOString(),
    code,
    transfers: options.transfers,
    seconds: options.seconds,
    states,
    counts: { ...requests.counts, ...faults.counts, nodeCrashes },
    violations,
    notes,
    dir,
    durationMs: Date.now() - started,
  };

  // Stopped before the directory is removed (they write into it); disposing again at the end is a no-op.
  await cluster[Symbol.asyncDispose]();
  // The run directory keeps the node logs and destinations when something broke (or when asked to).
  if (violations.length > 0 || options.keep) {
    for (const node of cluster.nodes)
      await writeFile(join(dir, `${node.id}.log`), node.logs.map((l) => `#${l.life} ${l.line}`).join('\n'));
    await writeFile(join(dir, 'timeline.log'), timeline.join('\n'));
    await writeFile(
      join(dir, 'transfers.log'),
      [...tracked.values()].map((t) => [t.spec.id, ...t.events.map((e) => `  ${e}`)].join('\n')).join('\n'),
    );
  } else await rm(dir, { recursive: true, force: true });
  return summary;
}
