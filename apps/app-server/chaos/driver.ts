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
import { CHAOS_LIMITS, type ChaosNode, Cluster } from './cluster.js';
import { Destinations, type Sample } from './destinations.js';
import { FaultInjector } from './faults.js';
import { describe, request } from './http.js';
import { type ChaosOptions, Rng } from './options.js';
import { planTransfers, type TransferSpec, writeSources } from './workload.js';

export interface Violation {
  kind: string;
  transfer: string | null;
  detail: string;
  evidence: string[];
}

export interface ChaosSummary {
  seed: number;
  startedAt: string;
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

const FINAL = new Set(['COMPLETED', 'FAILED', 'TERMINATED']);

/** What the driver knows about one transfer: its own requests and what it saw, for the evidence. */
interface Tracked {
  spec: TransferSpec;
  accepted: boolean;
  events: string[];
  /** The first final state seen: terminal states never change. */
  final: string | null;
  // biome-ignore lint/suspicious/noExplicitAny: the record as the API returned it
  record: any;
  terminate: boolean;
  /** The destination when TERMINATED was first reported to the driver. */
  terminatedSample: { at: number; sample: Sample; how: string } | null;
}

export async function runChaos(
  options: ChaosOptions,
  progress: (line: string) => void = () => {},
): Promise<ChaosSummary> {
  const started = Date.now();
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
  const tracked = new Map<string, Tracked>();
  const note = (t: Tracked, message: string) => t.events.push(`${rel()} ${message}`);
  const violate = (kind: string, transfer: string | null, detail: string, evidence: string[] = []) => {
    violations.push({ kind, transfer, detail, evidence });
    progress(`${rel()} VIOLATION ${kind}${transfer ? ` ${transfer}` : ''}: ${detail}`);
  };
  let nodeCrashes = 0;
  const failedStart = (message: string) => {
    notes.push(`failed start (retried): ${message.replace(/\s+/g, ' ').slice(0, 300)}`);
    progress(`${rel()} failed start (retried): ${message.split('\n').slice(0, 2).join(' ')}`);
  };
  const counts = { submits: 0, resubmits: 0, terminatesSent: 0, terminatesReported: 0 };

  await using storeDb = await createTestDatabase('sluice_chaos_store');
  await using destDb = await createTestDatabase('sluice_chaos_dest');
  await using nats = await startNatsServer();
  const fileRoot = join(dir, 'files');
  const sources = await writeSources(join(fileRoot, 'in'), rng.fork(1));
  const specs = planTransfers(options.transfers, sources, join(fileRoot, 'out'), rng.fork(2));
  for (const spec of specs)
    tracked.set(spec.id, {
      spec,
      accepted: false,
      events: [],
      final: null,
      record: null,
      terminate: false,
      terminatedSample: null,
    });
  await using destinations = await Destinations.prepare(destDb.url, nats.port, specs);
  let running = true;
  let cluster: Cluster | null = null;
  cluster = await Cluster.create({
    dir: join(dir, 'nodes'),
    storeUrl: storeDb.url,
    natsUrl: nats.url,
    destUrl: destDb.url,
    fileRoot,
    bin: options.bin,
    nodes: 3,
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
  const requestRng = rng.fork(4);
  const anyUp = async (): Promise<ChaosNode> => {
    for (;;) {
      const up = cluster.up();
      if (up.length > 0) return requestRng.pick(up);
      await sleep(100);
    }
  };
  /** Replies every submit must respect, wherever and whenever it is sent. */
  // biome-ignore lint/suspicious/noExplicitAny: see Reply
  const checkSubmitReply = (t: Tracked, node: ChaosNode, status: number, body: any) => {
    if (status === 422 && body?.code === 'IDEMPOTENCY_CONFLICT')
      violate(
        'idempotency conflict',
        t.spec.id,
        `the same body resent to ${node.id} was refused: ${describe(body)}`,
      );
    if (status >= 500 && body?.code !== 'STORE_UNAVAILABLE' && body?.code !== 'BACKPLANE_UNAVAILABLE')
      violate('internal error', t.spec.id, `submit to ${node.id}: ${status} ${describe(body)}`);
  };

  const submit = async (t: Tracked, resend: boolean): Promise<boolean> => {
    const node = await anyUp();
    const reply = await request(`${node.url}/v1/transfers`, { json: t.spec.body });
    if (resend) counts.resubmits += 1;
    else counts.submits += 1;
    const what = resend ? 'resubmit' : 'submit';
    if (!reply.ok) {
      note(t, `${what} → ${node.id}: ${reply.error}`);
      return false;
    }
    note(t, `${what} → ${node.id}: ${reply.status} ${describe(reply.body)}`);
    checkSubmitReply(t, node, reply.status, reply.body);
    return reply.status >= 200 && reply.status < 300;
  };

  const terminate = async (t: Tracked) => {
    for (let attempt = 0; attempt < 6 && t.final === null; attempt++) {
      const node = await anyUp();
      counts.terminatesSent += 1;
      // Terminate answers once the owner stopped: give it a few leases.
      const reply = await request(`${node.url}/v1/transfers/${t.spec.id}/terminate`, {
        method: 'POST',
        timeoutMs: 10_000,
      });
      if (!reply.ok) {
        note(t, `terminate → ${node.id}: ${reply.error}`);
        await sleep(500);
        continue;
      }
      note(t, `terminate → ${node.id}: ${reply.status} ${describe(reply.body)}`);
      if (reply.status === 200 && reply.body?.state === 'TERMINATED') {
        counts.terminatesReported += 1;
        await observeFinal(t, reply.body, `terminate reply from ${node.id}`);
        return;
      }
      if (reply.status === 409) return; // already COMPLETED or FAILED
      if (
        reply.status >= 500 &&
        reply.body?.code !== 'STORE_UNAVAILABLE' &&
        reply.body?.code !== 'BACKPLANE_UNAVAILABLE'
      )
        violate(
          'internal error',
          t.spec.id,
          `terminate on ${node.id}: ${reply.status} ${describe(reply.body)}`,
        );
      await sleep(500);
    }
  };

  // biome-ignore lint/suspicious/noExplicitAny: the record as the API returned it
  const observeFinal = async (t: Tracked, record: any, how: string) => {
    t.record = record;
    if (!FINAL.has(record.state)) return;
    if (t.final === null) {
      t.final = record.state;
      note(t, `${record.state} (${how}) epoch=${record.epoch} owner=${record.owner?.nodeId ?? '-'}`);
      if (record.state === 'TERMINATED') {
        const at = Date.now();
        try {
          t.terminatedSample = { at, sample: await destinations.sample(t.spec), how };
        } catch (err) {
          notes.push(
            `${t.spec.id}: could not sample the destination at TERMINATED: ${(err as Error).message}`,
          );
        }
      }
    } else if (t.final !== record.state)
      violate('terminal state changed', t.spec.id, `was ${t.final}, now ${record.state} (${how})`);
  };

  /** Reads every record through one live node's list route. */
  const poll = async (): Promise<boolean> => {
    const node = await anyUp();
    let cursor: string | null = null;
    do {
      const query: string = `limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const reply = await request(`${node.url}/v1/transfers?${query}`);
      if (!reply.ok || reply.status !== 200) return false;
      for (const record of reply.body.records ?? []) {
        const t = tracked.get(record.id);
        if (!t) {
          violate(
            'unknown record',
            record.id,
            `the store lists a transfer nobody submitted: ${describe(record)}`,
          );
          continue;
        }
        await observeFinal(t, record, `listed by ${node.id}`);
      }
      cursor = reply.body.next ?? null;
    } while (cursor);
    return true;
  };

  // Submissions are spread over the first two thirds of the fault window; each is retried until a node accepts it.
  const chaosEnd = Date.now() + options.seconds * 1_000;
  const window = options.seconds * 1_000 * (2 / 3);
  const submitters = specs.map(async (spec, i) => {
    const t = tracked.get(spec.id)!;
    await sleep((window * i) / Math.max(1, specs.length) + requestRng.int(0, 300));
    while (!t.accepted) {
      t.accepted = await submit(t, false);
      if (!t.accepted) await sleep(requestRng.int(200, 800));
    }
    // About one in six is terminated (by position, so even a small run terminates some).
    if (i % 6 === 4) {
      t.terminate = true;
      await sleep(requestRng.int(200, 6_000));
      if (running) await terminate(t);
    }
  });
  const resubmitter = (async () => {
    while (running) {
      await sleep(requestRng.int(150, 500));
      const open = [...tracked.values()].filter((t) => t.accepted && t.final === null);
      if (open.length > 0) void submit(requestRng.pick(open), true);
    }
  })();
  const poller = (async () => {
    while (running) {
      await poll();
      await sleep(1_000);
    }
  })();

  const faults = new FaultInjector(cluster, nats, chaosRng, {
    event,
    problem: (kind, detail, evidence) => violate(kind, null, detail, evidence),
    failedStart,
  });
  await faults.run(chaosEnd);
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
    await poll();
    const open = [...tracked.values()].filter((t) => t.final === null).length;
    if (open === 0) break;
    await sleep(1_000);
  }
  event(`settled: ${[...tracked.values()].filter((t) => t.final === null).length} not final`);
  // A stale writer of a TERMINATED transfer would show up after its lease at the latest.
  await sleep(CHAOS_LIMITS.leaseMs * 2);
  await poll();

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
    transfers: options.transfers,
    seconds: options.seconds,
    states,
    counts: { ...counts, ...faults.counts, nodeCrashes },
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

/** Log lines (pino JSON) of every life of every node that name the transfer, compacted to one line each. */
function logsAbout(nodes: ChaosNode[], transferId: string, started: number): string[] {
  const lines: Array<{ at: number; text: string }> = [];
  for (const node of nodes)
    for (const { life, line } of node.logs) {
      if (!line.includes(transferId)) continue;
      try {
        const entry = JSON.parse(line) as Record<string, unknown>;
        const { time, level, msg, pid: _pid, hostname: _host, node: _node, transferId: _id, ...rest } = entry;
        // Stacks drown the sequence of events; the error's type and message stay.
        if (rest.err && typeof rest.err === 'object') delete (rest.err as Record<string, unknown>).stack;
        const at = typeof time === 'number' ? time : started;
        const extra = JSON.stringify(rest);
        lines.push({
          at,
          text: `${node.id}#${life} +${((at - started) / 1000).toFixed(1)}s ${levelName(level)} ${msg} ${extra === '{}' ? '' : extra.slice(0, 300)}`,
        });
      } catch {
        lines.push({ at: started, text: `${node.id}#${life} ${line.slice(0, 300)}` });
      }
    }
  return lines.sort((a, b) => a.at - b.at).map((l) => l.text);
}

function levelName(level: unknown): string {
  return (
    (
      { 10: 'trace', 20: 'debug', 30: 'info', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' } as Record<string, string>
    )[String(level)] ?? String(level)
  );
}
