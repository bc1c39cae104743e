/**
 * The chaos run of the PostgreSQL mirror (change data capture), driven only through public contracts: a private
 * PostgreSQL with `wal_level=logical`, a nats-server, one app-server and one api-server (real processes sharing one
 * host's configuration) mirroring `accounts`. A writer commits invariant-keeping transactions, readers check every
 * answer of the query API, and faults hit every part (see cdc-faults.ts). At the end, quiesced, the endpoint must
 * equal the table row for row, field for field.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep, sql, startLogicalPostgres, startNatsServer } from '@sluice/testkit';
import { type CdcFault, CdcFaultInjector, generationsOf, WAL_SENDER_TIMEOUT_MS } from './cdc-faults.js';
import { ChangeFeedReplica, type FeedCounts } from './cdc-feed.js';
import type { CdcChaosOptions } from './cdc-options.js';
import { CdcOverlapSchedule, type OverlapCounts } from './cdc-overlap.js';
import {
  type AccountRow,
  ENDPOINT,
  fetchJson,
  type ReadCounts,
  Readers,
  wholeProblems,
} from './cdc-readers.js';
import { AccountsWriter, createAccounts, type WriteKind } from './cdc-writer.js';
import { type ChaosNode, Cluster } from './cluster.js';
import { codeVersion } from './evidence.js';
import { Rng } from './options.js';

const API_SOURCE = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'api-server', 'src', 'bin.ts');

export interface CdcViolation {
  kind: string;
  detail: string;
  evidence: string[];
}

export interface CdcSummary {
  seed: number;
  startedAt: string;
  code: string;
  seconds: number;
  rows: number;
  transactions: number;
  writes: Record<WriteKind, number>;
  /** Transactions whose connection broke (PostgreSQL restarted), and how many of those had committed. */
  connectionLosses: number;
  uncertainCommits: number;
  faults: Record<CdcFault, number>;
  /** `--overlap`: how much the faults overlapped (null: one at a time). */
  overlap: OverlapCounts | null;
  /** Restarts timed against a held COMMIT: inside it, after it (before the reply was read), or not reached. */
  commitRestarts: { inCommit: number; afterCommit: number; missed: number };
  /** Processes that exited on their own. */
  crashes: number;
  reads: ReadCounts;
  /** The change-feed subscriber's events, commits checked, reconnects, switches and resets. */
  feed: FeedCounts;
  /**
   * The alias's switches by cause (`rebuild`, `restart`…), read from the generations at the end: a `restart`
   * switch is a restart that could not resume in place (case 4); its reason is noted.
   */
  switches: Record<string, number>;
  /** Rows compared at the end (the table's). */
  finalRows: number;
  violations: CdcViolation[];
  notes: string[];
  dir: string;
  durationMs: number;
}

/** The host's configuration, read by both processes (the api-server's `node.port` is the app-server's). */
function hostYaml(
  dir: string,
  dbUrl: string,
  natsUrl: string,
  appPort: number,
  apiPort: number,
  rows: number,
) {
  return [
    `node: { id: h1, port: ${appPort}, advertisedUrl: "http://127.0.0.1:${appPort}" }`,
    `store: "sqlite:${join(dir, 'store.db')}"`,
    `nats: "${natsUrl}"`,
    `dataDir: "${join(dir, 'data')}"`,
    'connections:',
    `  db: { type: postgres, url: "${dbUrl}" }`,
    `api: { port: ${apiPort} }`,
    // One answer holds the whole endpoint: its invariants are checked per answer.
    `query: { maxLimit: ${Math.max(1_000, rows * 2)} }`,
    'logLevel: info',
    'endpoints:',
    `  - name: ${ENDPOINT}`,
    '    source: { type: postgres, connection: db, table: accounts }',
    '    primaryKey: [id]',
    '    fields: { id: integer, balance: integer, note: string, txn: integer }',
    '',
  ].join('\n');
}

export async function runCdcChaos(
  options: CdcChaosOptions,
  progress: (line: string) => void = () => {},
): Promise<CdcSummary> {
  const started = Date.now();
  const code = codeVersion();
  const rel = () => `+${((Date.now() - started) / 1000).toFixed(1)}s`;
  const rng = new Rng(options.seed);
  const violations: CdcViolation[] = [];
  const notes: string[] = [];
  const timeline: string[] = [];
  const event = (message: string) => {
    timeline.push(`${rel()} ${message}`);
    progress(`${rel()} ${message}`);
  };
  const recent = () => timeline.slice(-6).map((l) => `timeline ${l}`);
  const violate = (v: CdcViolation) => {
    violations.push(v);
    progress(`${rel()} VIOLATION ${v.kind}: ${v.detail}`);
  };
  const failedStart = (message: string) => {
    notes.push(`failed start (retried): ${message.replace(/\s+/g, ' ').slice(0, 300)}`);
    progress(`${rel()} failed start (retried): ${message.split('\n').slice(0, 2).join(' ')}`);
  };
  let crashes = 0;
  let running = true;
  const dir = await mkdtemp(join(tmpdir(), 'sluice-cdc-chaos-'));

  await using postgres = await startLogicalPostgres({
    settings: { wal_sender_timeout: `${WAL_SENDER_TIMEOUT_MS}ms` },
  });
  await using nats = await startNatsServer();
  const dbUrl = await postgres.createDatabase('cdc_chaos');
  const expected = await createAccounts(dbUrl, options.rows);

  const onUnexpectedExit = (cluster: () => Cluster, node: ChaosNode, how: string, tail: string[]) => {
    crashes += 1;
    violate({
      kind: 'process crashed',
      detail: `${node.id} life ${node.life} exited on its own (${how})`,
      evidence: tail,
    });
    if (running)
      void sleep(1_000).then(() =>
        cluster()
          .startRetrying(node, failedStart)
          .catch(() => {}),
      );
  };
  let appPort = 0;
  let apiPort = 0;
  const app: Cluster = await Cluster.create({
    dir: join(dir, 'app'),
    ids: ['app-server'],
    nodes: 1,
    bin: 'src',
    started,
    config: (node) => {
      appPort = node.port;
      return hostYaml(dir, dbUrl, nats.url, node.port, 0, options.rows);
    },
    onUnexpectedExit: (node, how, tail) => onUnexpectedExit(() => app, node, how, tail),
  });
  await using _app = app;
  const api: Cluster = await Cluster.create({
    dir: join(dir, 'api'),
    ids: ['api-server'],
    nodes: 1,
    bin: 'src',
    started,
    program: { source: API_SOURCE, ready: /listening/i },
    config: (node) => {
      apiPort = node.port;
      return hostYaml(dir, dbUrl, nats.url, appPort, node.port, options.rows);
    },
    onUnexpectedExit: (node, how, tail) => onUnexpectedExit(() => api, node, how, tail),
  });
  await using _api = api;
  // The app-server's own file names the api-server's port too, as one host's file does.
  await writeFile(
    join(app.nodes[0]!.dir, 'sluice.yaml'),
    hostYaml(dir, dbUrl, nats.url, appPort, apiPort, options.rows),
  );
  const appNode = app.nodes[0]!;
  const apiNode = api.nodes[0]!;
  const apiUrl = apiNode.url;
  progress(`seed ${options.seed}: ${options.rows} accounts, ${options.seconds} s of faults, run dir ${dir}`);

  await app.start(appNode);
  await waitUntil(
    async () => (await generationsOf(appNode.url))?.serving != null,
    120_000,
    'the first snapshot',
  );
  await api.start(apiNode);
  event(`app-server ${appNode.url}, api-server ${apiUrl}: serving`);

  const writer = new AccountsWriter(dbUrl, options.rows, rng.fork(1), event);
  const readers = new Readers(apiUrl, writer, expected, rng.fork(2), violate, recent);
  const faults = new CdcFaultInjector({ app, appNode, api, apiNode, postgres, writer }, rng.fork(3), {
    event,
    problem: (kind, detail, evidence = []) => violate({ kind, detail, evidence: [...evidence, ...recent()] }),
    failedStart,
  });
  const overlap = options.overlap ? new CdcOverlapSchedule(faults, rng.fork(4)) : null;
  await using feed = new ChangeFeedReplica(apiUrl, expected, rng.fork(5), violate, recent);
  feed.start();
  writer.start();
  readers.start();
  const until = Date.now() + options.seconds * 1_000;
  await (overlap ? overlap.run(until) : faults.run(until));

  // Quiesce: everything up, the writer stopped, then the readers; the final read asks for the last position.
  event('faults over: healing');
  if (!postgres.running) await postgres.start();
  await app.heal(failedStart);
  await api.heal(failedStart);
  // Writes go on a little after the last fault: the mirror has to recover from it under load, not idle.
  await sleep(3_000);
  await writer.stop();
  await sleep(1_000);
  await readers.stop();
  running = false;
  readers.settleAbsences();
  for (const line of readers.wentBack) notes.push(`sluice-position went back: ${line}`);
  const finalLsn = (await sql<{ lsn: string }>(dbUrl, 'SELECT pg_current_wal_lsn()::text AS lsn'))[0]!.lsn;
  const table = await sql<AccountRow>(dbUrl, 'SELECT id, balance, note, txn FROM accounts ORDER BY id');
  const tableProblems = wholeProblems(table, expected);
  if (tableProblems.length > 0)
    notes.push(`the writer broke its own invariants in the table: ${tableProblems.join('; ')}`);
  event(`quiesced at ${finalLsn}: ${writer.writes.length} transactions, ${table.length} rows in the table`);
  const served = await waitUntil(
    async () => {
      const reply = await fetchJson(
        `${apiUrl}/v1/endpoints/${ENDPOINT}/query`,
        { $order_by: { id: 'asc' }, $limit: options.rows * 2 },
        { 'sluice-min-position': finalLsn },
      );
      return reply.ok && reply.status === 200 ? (reply.body.records as AccountRow[]) : null;
    },
    120_000,
    `the api-server to serve ${finalLsn}`,
  ).catch((err: Error) => {
    violate({ kind: 'not caught up', detail: err.message, evidence: recent() });
    return null;
  });
  if (served) {
    const diff = mirrorDiff(table, served);
    if (diff.length > 0)
      violate({
        kind: 'mirror differs from the table',
        detail: `${diff.length} differences at ${finalLsn}`,
        evidence: diff.slice(0, 30),
      });
  }

  // The feed's replica must reach the same rows (at a commit) once the api-server serves them.
  const caughtUp = await waitUntil(async () => feed.matches(table), 60_000, 'the change feed').catch(
    () => false,
  );
  await feed.stop();
  if (!caughtUp) {
    const diff = feed.diff(table);
    violate({
      kind: 'feed replica differs from the table',
      detail:
        diff.length === 0
          ? `the replica holds the table's rows but not at a commit (${feed.where}) 60 s after the end`
          : `${diff.length} differences 60 s after the end (${feed.where})`,
      evidence: diff.slice(0, 30),
    });
  }
  feed.settleTransactions(writer);
  for (const line of feed.notes) notes.push(`change feed: ${line}`);

  const switches = await switchesByCause(appNode.url, notes);

  const summary: CdcSummary = {
    seed: options.seed,
    startedAt: new Date(started).toISOString(),
    code,
    seconds: options.seconds,
    rows: options.rows,
    transactions: writer.writes.length,
    writes: writer.counts,
    connectionLosses: writer.connectionLosses,
    uncertainCommits: writer.uncertainCommits,
    faults: faults.counts,
    overlap: overlap?.overlap ?? null,
    commitRestarts: faults.commitRestarts,
    crashes,
    reads: readers.counts,
    feed: feed.counts,
    switches,
    finalRows: table.length,
    violations,
    notes,
    dir,
    durationMs: Date.now() - started,
  };
  await api[Symbol.asyncDispose]();
  await app[Symbol.asyncDispose]();
  if (violations.length > 0 || options.keep) {
    for (const node of [appNode, apiNode])
      await writeFile(join(dir, `${node.id}.log`), node.logs.map((l) => `#${l.life} ${l.line}`).join('\n'));
    await writeFile(join(dir, 'timeline.log'), timeline.join('\n'));
    await writeFile(join(dir, 'postgres.log'), await postgres.log());
  } else await rm(dir, { recursive: true, force: true });
  return summary;
}

/** Counts the alias's switches by cause; notes why each generation a restart built was built. */
async function switchesByCause(appUrl: string, notes: string[]): Promise<Record<string, number>> {
  const reply = await fetchJson(`${appUrl}/v1/endpoints/${ENDPOINT}/generations`, undefined, {});
  if (!reply.ok || reply.status !== 200) {
    notes.push('the generations could not be read at the end: switches not counted');
    return {};
  }
  const out: Record<string, number> = {};
  const generations = reply.body.generations as Array<{ name: string; reason: string | null }>;
  for (const entry of reply.body.history as Array<{
    from: string | null;
    to: string;
    cause: string;
    at: string;
  }>) {
    out[entry.cause] = (out[entry.cause] ?? 0) + 1;
    // The first snapshot's switch (from nothing) is a restart too: not worth a note.
    if (entry.cause === 'restart' && entry.from !== null)
      notes.push(
        `switch caused by a restart at ${entry.at} to ${entry.to}: ${generations.find((g) => g.name === entry.to)?.reason ?? '(generation gone)'}`,
      );
  }
  return out;
}

/** Row-for-row, field-for-field differences between the table and what the api-server serves. */
export function mirrorDiff(table: AccountRow[], served: AccountRow[]): string[] {
  const out: string[] = [];
  const servedById = new Map<number, AccountRow>();
  for (const row of served) {
    if (servedById.has(row.id)) out.push(`key ${row.id} served twice`);
    servedById.set(row.id, row);
  }
  const tableIds = new Set<number>();
  for (const row of table) {
    tableIds.add(row.id);
    const got = servedById.get(row.id);
    if (!got) out.push(`key ${row.id} missing: table has ${JSON.stringify(row)}`);
    else if (JSON.stringify(got) !== JSON.stringify(row))
      out.push(`key ${row.id}: table ${JSON.stringify(row)}, served ${JSON.stringify(got)}`);
  }
  for (const row of served)
    if (!tableIds.has(row.id)) out.push(`key ${row.id} served but not in the table: ${JSON.stringify(row)}`);
  return out;
}

async function waitUntil<T>(
  check: () => Promise<T | null | false | undefined>,
  timeoutMs: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check().catch(() => null);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(300);
  }
}
