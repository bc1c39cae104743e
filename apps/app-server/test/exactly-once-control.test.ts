/**
 * Exactly once as a client sees it through the control API: three real app-server processes on one PostgreSQL store
 * database of the test's own and a private nats-server, transfers submitted over HTTP (idempotent mode) into a
 * PostgreSQL destination whose every physical write a trigger counts, so a second run or a replayed batch shows.
 * What the other multi-process tests leave out: racing submits of one id with two different bodies, a resubmit
 * while ownership moves off a paused owner of a PostgreSQL query → table transfer, and a terminate sent to a node
 * that does not run the transfer, of a transfer that follows its file.
 */
import { appendFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import {
  createTestDatabase,
  type NatsServerHandle,
  sleep,
  sql,
  startNatsServer,
  startTcpProxy,
  type TempDir,
  type TestDatabase,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  call,
  createCountedDestination,
  exactlyOnce,
  FAST_TRANSFERS,
  fileTransfer,
  type NodeProcess,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';
import { openStoreGates, type StoreGates } from './store-gates.js';

let store: TestDatabase;
let nats: NatsServerHandle;
let dir: TempDir;
const destinations: TestDatabase[] = [];
const nodes = new Map<string, NodeProcess>();
const files = (name: string) => join(dir.path, 'files', name);

/** A destination database of its own with a counted `dst` table, named `connection` in every node's config. */
async function countedDestination(tag: string) {
  const db = await createTestDatabase(`sluice_once_${tag}`);
  destinations.push(db);
  return { db, writes: await createCountedDestination(db.url) };
}

function node(nodeId: string): NodeProcess {
  const found = nodes.get(nodeId);
  if (!found) throw new Error(`node ${nodeId} is not running`);
  return found;
}

/** Every node's last log lines, for a failure's message. */
function logs(): string {
  return [...nodes.values()].map((n) => `--- ${n.nodeId}\n${n.child.output().slice(-4_000)}`).join('\n');
}

let burst: Awaited<ReturnType<typeof countedDestination>>;
let moving: Awaited<ReturnType<typeof countedDestination>>;
let follow: Awaited<ReturnType<typeof countedDestination>>;
let raced: Awaited<ReturnType<typeof countedDestination>>;
let followMoved: Awaited<ReturnType<typeof countedDestination>>;
let followPaused: Awaited<ReturnType<typeof countedDestination>>;
let frozenTx: Awaited<ReturnType<typeof countedDestination>>;
let source: TestDatabase;
/**
 * Store gates (store-gates.ts), installed once: the late terminate's COMPLETED parks on 41, the cut store
 * connection's last write (its finishing step or COMPLETED) on 51.
 */
let gates: StoreGates;
const SOURCE_ROWS = 3_000;

beforeAll(async () => {
  store = await createTestDatabase('sluice_once_store');
  nats = await startNatsServer();
  dir = await tempDir('sluice-once-');
  burst = await countedDestination('burst');
  moving = await countedDestination('moving');
  follow = await countedDestination('follow');
  raced = await countedDestination('raced');
  followMoved = await countedDestination('follow_moved');
  followPaused = await countedDestination('follow_paused');
  frozenTx = await countedDestination('frozen_tx');
  source = await createTestDatabase('sluice_once_src');
  destinations.push(source);
  await sql(source.url, 'CREATE TABLE src (id integer PRIMARY KEY, value double precision, category text)');
  await sql(
    source.url,
    `INSERT INTO src SELECT i, i * 1.5, CASE WHEN i % 3 = 0 THEN 'c' ELSE 'a' END FROM generate_series(1, $1::int) i`,
    [SOURCE_ROWS],
  );
  const connections = [
    `burst: { type: postgres, url: "${burst.db.url}" }`,
    `moving: { type: postgres, url: "${moving.db.url}" }`,
    `follow: { type: postgres, url: "${follow.db.url}" }`,
    `src: { type: postgres, url: "${source.url}" }`,
    `raced: { type: postgres, url: "${raced.db.url}" }`,
    `followMoved: { type: postgres, url: "${followMoved.db.url}" }`,
    `followPaused: { type: postgres, url: "${followPaused.db.url}" }`,
    `frozenTx: { type: postgres, url: "${frozenTx.db.url}" }`,
  ];
  await Promise.all(
    ['n1', 'n2', 'n3'].map(async (nodeId) => {
      const started = await startNodeProcess({
        nodeId,
        dir: join(dir.path, nodeId),
        store: store.url,
        nats: nats.url,
        roots: [join(dir.path, 'files')],
        extraYaml: `connections: { ${connections.join(', ')} }`,
      });
      nodes.set(nodeId, started);
    }),
  );
  gates = await openStoreGates(store, {
    rowHolds: `IF NEW.id = 'late-term-1' AND NEW.state = 'COMPLETED' THEN PERFORM pg_advisory_xact_lock_shared(41); END IF;
               IF NEW.id = 'cut-1' AND (NEW.state = 'COMPLETED' OR NEW.finishing_epoch IS DISTINCT FROM OLD.finishing_epoch)
               THEN PERFORM pg_advisory_xact_lock_shared(51); END IF;`,
    updateGate: 42,
  });
}, 120_000);

afterAll(async () => {
  await gates?.[Symbol.asyncDispose]();
  for (const n of nodes.values()) n.child.kill('SIGCONT');
  await Promise.allSettled([...nodes.values()].map((n) => n.child.stop('SIGKILL')));
  await nats?.[Symbol.asyncDispose]();
  for (const db of destinations) await db[Symbol.asyncDispose]();
  await store?.[Symbol.asyncDispose]();
  await dir?.[Symbol.asyncDispose]();
});

describe('exactly once through the control API (3 nodes, PostgreSQL + NATS)', { timeout: 90_000 }, () => {
  it('20 racing submits of one id with two bodies over 3 nodes: one run; every caller of the other body 422', async () => {
    const input = await writeRecords(files('burst-in.jsonl'), 2_000);
    const toTable = (tag: string) => ({
      ...fileTransfer('race-1', input, files('unused.jsonl'), 1_000),
      destination: { type: 'postgres', connection: 'burst', table: 'dst', key: 'id' },
      properties: { body: tag },
    });
    const bodies = [toTable('a'), toTable('b')];
    const urls = ['n1', 'n2', 'n3'].map((id) => node(id).url);
    const replies = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        call(`${urls[i % 3]}/v1/transfers`, { json: bodies[i % 2] }).then((reply) => ({
          reply,
          body: i % 2,
        })),
      ),
    );
    const created = replies.filter(({ reply }) => reply.status === 201);
    expect(created, JSON.stringify(replies.map(({ reply }) => reply.status))).toHaveLength(1);
    const winner = created[0]!.body;
    const owner = created[0]!.reply.body.owner.nodeId;
    for (const { reply, body } of replies) {
      if (body === winner) {
        expect([200, 201, 202], JSON.stringify(reply.body)).toContain(reply.status);
        expect(reply.body.owner.nodeId, JSON.stringify(reply.body)).toBe(owner);
        expect(reply.body.request.properties, JSON.stringify(reply.body)).toEqual({
          body: winner === 0 ? 'a' : 'b',
        });
        if (reply.status === 202) expect(reply.body.resumed).toBe(false);
      } else {
        expect(reply.status, JSON.stringify(reply.body)).toBe(422);
        expect(reply.body.code).toBe('IDEMPOTENCY_CONFLICT');
      }
    }
    const done = await waitForState(urls[0]!, 'race-1', 'COMPLETED', 60_000);
    expect(done).toMatchObject({
      epoch: 1,
      attempts: 1,
      request: { properties: { body: winner === 0 ? 'a' : 'b' } },
    });
    expect(done.result).toMatchObject({ recordsRead: 2_000, recordsWritten: 2_000 });
    expect(await burst.writes.counts()).toEqual({ n: 2_000, d: 2_000 });
  });

  it('a resubmit while the paused owner’s lease runs out (query → table): taken over, each key once with its value, the woken owner refused', async () => {
    const body = {
      id: 'moving-1',
      mode: 'idempotent',
      source: {
        type: 'postgres',
        connection: 'src',
        query: 'SELECT id, value, category FROM src',
        key: 'id',
      },
      destination: { type: 'postgres', connection: 'moving', table: 'dst', key: 'id' },
      options: { maxRecordsPerSecond: 600 },
    };
    const first = await call(`${node('n1').url}/v1/transfers`, { json: body });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    await waitFor(async () => (await moving.writes.counts()).n >= 300, {
      timeoutMs: 30_000,
      what: 'the owner to have written part of the table',
    });
    const owner = node('n1');
    owner.child.kill('SIGSTOP');
    let resubmit: Awaited<ReturnType<typeof call>>;
    try {
      // Past the lease by the store's clock; the paused owner cannot answer or renew it.
      await sleep(FAST_TRANSFERS.leaseMs + FAST_TRANSFERS.heartbeatMs * 2);
      resubmit = await call(`${node('n2').url}/v1/transfers`, { json: body });
    } finally {
      owner.child.kill('SIGCONT');
    }
    expect(resubmit.status, JSON.stringify(resubmit.body)).toBe(202);
    const done = await waitForState(node('n3').url, 'moving-1', 'COMPLETED', 60_000).catch((err) => {
      console.log(logs());
      throw err;
    });
    expect(done.epoch).toBeGreaterThanOrEqual(2);
    expect(done.owner.nodeId).not.toBe('n1');
    expect(done.result).toMatchObject({ recordsRead: SOURCE_ROWS, recordsWritten: SOURCE_ROWS });
    // Give the woken owner time to try whatever it still had in hand, then look at what landed.
    await sleep(FAST_TRANSFERS.leaseMs);
    expect(await moving.writes.counts()).toEqual({ n: SOURCE_ROWS, d: SOURCE_ROWS });
    const [diff] = await sql<{ missing: number; extra: number }>(
      moving.db.url,
      `SELECT (SELECT count(*)::int FROM generate_series(1, $1::int) i
                WHERE NOT EXISTS (SELECT 1 FROM dst d WHERE d.id = i AND d.value = i * 1.5
                  AND d.category = CASE WHEN i % 3 = 0 THEN 'c' ELSE 'a' END)) AS missing,
              (SELECT count(*)::int FROM dst WHERE id < 1 OR id > $1::int) AS extra`,
      [SOURCE_ROWS],
    );
    expect(diff).toEqual({ missing: 0, extra: 0 });
    expect((await call(`${node('n1').url}/v1/transfers`, { json: body })).status).toBe(200);
  });

  it('a terminate sent to a node that does not run a following transfer: TERMINATED once stopped, nothing lands after', async () => {
    const input = await writeRecords(files('follow-in.jsonl'), 500);
    const body = {
      id: 'follow-1',
      mode: 'idempotent',
      source: { type: 'file', path: input, format: 'jsonl', follow: true },
      destination: { type: 'postgres', connection: 'follow', table: 'dst', key: 'id' },
      options: { follow: true },
    };
    const first = await call(`${node('n1').url}/v1/transfers`, { json: body });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    await waitFor(async () => (await follow.writes.counts()).n >= 500, {
      timeoutMs: 30_000,
      what: 'the snapshot of the followed file to land',
    });
    await appendFile(input, `${JSON.stringify({ id: 501, value: 751.5, category: 'a' })}\n`);
    await waitFor(async () => (await follow.writes.counts()).n >= 501, {
      timeoutMs: 30_000,
      what: 'an appended record to be followed',
    });
    const stopped = await call(`${node('n2').url}/v1/transfers/follow-1/terminate`, { method: 'POST' });
    expect(stopped.status, JSON.stringify(stopped.body)).toBe(200);
    expect(stopped.body.state).toBe('TERMINATED');
    expect(stopped.body.epoch).toBe(1);
    const after = await follow.writes.counts();
    await appendFile(input, `${JSON.stringify({ id: 502, value: 753, category: 'c' })}\n`);
    await sleep(FAST_TRANSFERS.leaseMs * 2);
    expect(await follow.writes.counts()).toEqual(after);
    expect(after).toEqual({ n: 501, d: 501 });
    const again = await call(`${node('n3').url}/v1/transfers/follow-1/terminate`, { method: 'POST' });
    expect(again.status).toBe(200);
    const resend = await call(`${node('n3').url}/v1/transfers`, { json: body });
    expect(resend.status).toBe(200);
    expect(resend.body.state).toBe('TERMINATED');
  });

  it('a terminate and a resubmit racing to two nodes while the paused owner’s lease runs out: TERMINATED, nothing lands after', async () => {
    const input = await writeRecords(files('raced-in.jsonl'), 4_000);
    const body = {
      ...fileTransfer('raced-1', input, files('unused.jsonl'), 500),
      destination: { type: 'postgres', connection: 'raced', table: 'dst', key: 'id' },
    };
    const first = await call(`${node('n1').url}/v1/transfers`, { json: body });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    await waitFor(async () => (await raced.writes.counts()).n >= 300, {
      timeoutMs: 30_000,
      what: 'the owner to have written part of the table',
    });
    const owner = node('n1');
    owner.child.kill('SIGSTOP');
    let resubmit: Awaited<ReturnType<typeof call>>;
    let stopped: Awaited<ReturnType<typeof call>>;
    try {
      await sleep(FAST_TRANSFERS.leaseMs + FAST_TRANSFERS.heartbeatMs * 2);
      [resubmit, stopped] = await Promise.all([
        call(`${node('n2').url}/v1/transfers`, { json: body }),
        call(`${node('n3').url}/v1/transfers/raced-1/terminate`, { method: 'POST' }),
      ]);
    } finally {
      owner.child.kill('SIGCONT');
    }
    expect([200, 202], JSON.stringify(resubmit.body)).toContain(resubmit.status);
    // The terminate reached whoever owned it by then. A successor can still be waiting on the destination's fence
    // row, held by the paused owner's open sink transaction until the server ends that session; its terminate then
    // answers 503 BACKPLANE_UNAVAILABLE (lease fresh, not stopped yet) — but the owner was told to stop, and does.
    if (stopped.status === 200) expect(stopped.body.state).toBe('TERMINATED');
    else expect(stopped.body.code, JSON.stringify(stopped.body)).toBe('BACKPLANE_UNAVAILABLE');
    await waitForState(node('n2').url, 'raced-1', 'TERMINATED', 45_000);
    const atTerminate = await raced.writes.counts();
    // The woken owner and the resubmit's run (if it claimed) have had time to try to write more.
    await sleep(FAST_TRANSFERS.leaseMs * 2);
    const record = await call(`${node('n1').url}/v1/transfers/raced-1`);
    expect(record.body.state).toBe('TERMINATED');
    expect(await raced.writes.counts()).toEqual(atTerminate);
    expect(atTerminate.n, 'a record written twice').toBe(atTerminate.d);
    expect((await call(`${node('n2').url}/v1/transfers`, { json: body })).body.state).toBe('TERMINATED');
  });

  it('a following transfer taken over from its paused owner: each appended record applied once, the woken owner refused', async () => {
    const input = await writeRecords(files('follow-moved-in.jsonl'), 1_000);
    const body = {
      id: 'follow-moved-1',
      mode: 'idempotent',
      source: { type: 'file', path: input, format: 'jsonl', follow: true },
      destination: { type: 'postgres', connection: 'followMoved', table: 'dst', key: 'id' },
      options: { follow: true, maxRecordsPerSecond: 400 },
    };
    const line = (id: number) =>
      `${JSON.stringify({ id, value: id * 1.5, category: id % 3 === 0 ? 'c' : 'a' })}\n`;
    const first = await call(`${node('n1').url}/v1/transfers`, { json: body });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    await waitFor(async () => (await followMoved.writes.counts()).n >= 300, {
      timeoutMs: 30_000,
      what: 'the owner to have written part of the file',
    });
    const owner = node('n1');
    owner.child.kill('SIGSTOP');
    let resubmit: Awaited<ReturnType<typeof call>>;
    try {
      for (let id = 1_001; id <= 1_100; id++) await appendFile(input, line(id));
      await sleep(FAST_TRANSFERS.leaseMs + FAST_TRANSFERS.heartbeatMs * 2);
      resubmit = await call(`${node('n2').url}/v1/transfers`, { json: body });
    } finally {
      owner.child.kill('SIGCONT');
    }
    // Taken over by this resubmit or by a sweeper that came first: either way by another node.
    expect(resubmit.status, JSON.stringify(resubmit.body)).toBe(202);
    expect(resubmit.body.owner.nodeId).not.toBe('n1');
    for (let id = 1_101; id <= 1_200; id++) await appendFile(input, line(id));
    await waitFor(async () => (await followMoved.writes.counts()).d >= 1_200, {
      timeoutMs: 60_000,
      what: 'every record of the followed file to land',
    }).catch((err) => {
      console.log(logs());
      throw err;
    });
    const stopped = await call(`${node('n3').url}/v1/transfers/follow-moved-1/terminate`, { method: 'POST' });
    expect(stopped.status, JSON.stringify(stopped.body)).toBe(200);
    expect(stopped.body.epoch).toBeGreaterThanOrEqual(2);
    await sleep(FAST_TRANSFERS.leaseMs);
    expect(await followMoved.writes.counts()).toEqual({ n: 1_200, d: 1_200 });
    const [diff] = await sql<{ wrong: number; n: number }>(
      followMoved.db.url,
      `SELECT count(*) FILTER (WHERE value <> id * 1.5
                OR category <> CASE WHEN id % 3 = 0 THEN 'c' ELSE 'a' END)::int AS wrong, count(*)::int AS n FROM dst`,
    );
    expect(diff).toEqual({ wrong: 0, n: 1_200 });
  });

  it('20 racing resubmits over 3 nodes as the paused owner’s lease runs out: one takeover, the file holds each record once', async () => {
    const input = await writeRecords(files('herd-in.jsonl'), 3_000);
    const output = files('herd-out.jsonl');
    const body = fileTransfer('herd-1', input, output, 1_000);
    const first = await call(`${node('n1').url}/v1/transfers`, { json: body });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    await waitFor(
      async () =>
        ((await call(`${node('n1').url}/v1/transfers/herd-1`)).body.progress?.recordsRead ?? 0) > 500,
      { timeoutMs: 30_000, what: 'the owner to be under way' },
    );
    const owner = node('n1');
    owner.child.kill('SIGSTOP');
    let replies: Awaited<ReturnType<typeof call>>[];
    try {
      // Resubmits arrive from about when the lease runs out, racing each other and the sweepers.
      await sleep(FAST_TRANSFERS.leaseMs);
      const urls = ['n2', 'n3', 'n1'].map((id) => node(id).url);
      replies = await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          await sleep((i % 5) * 100);
          // The paused node answers nothing: its callers are sent to the others.
          return call(`${urls[i % 2]}/v1/transfers`, { json: body });
        }),
      );
    } finally {
      owner.child.kill('SIGCONT');
    }
    for (const reply of replies) expect(reply.status, JSON.stringify(reply.body)).toBe(202);
    expect(replies.filter((r) => r.body.resumed === true).length).toBeLessThanOrEqual(1);
    const done = await waitForState(node('n3').url, 'herd-1', 'COMPLETED', 60_000);
    expect({ epoch: done.epoch, attempts: done.attempts }, logs()).toEqual({ epoch: 2, attempts: 2 });
    expect(done.owner.nodeId).not.toBe('n1');
    expect(done.result).toMatchObject({ recordsRead: 3_000, recordsWritten: 3_000 });
    await sleep(FAST_TRANSFERS.leaseMs);
    expect(await exactlyOnce(output, 3_000)).toBeNull();
  });

  it('a terminate sent to a non-owner while the owner records COMPLETED: 409, the record COMPLETED, each row once', async () => {
    // The raced database holds an earlier test's table: this transfer's rows and writes get tables of their own.
    const url = raced.db.url;
    const lateWrites = await createCountedDestination(url, 'late');
    const input = await writeRecords(files('late-in.jsonl'), 500);
    const body = {
      ...fileTransfer('late-term-1', input, files('unused.jsonl')),
      destination: { type: 'postgres', connection: 'raced', table: 'late', key: 'id' },
    };
    await gates.hold(41);
    let stopped: Awaited<ReturnType<typeof call>>;
    let resend: Awaited<ReturnType<typeof call>>;
    try {
      const first = await call(`${node('n2').url}/v1/transfers`, { json: body });
      expect(first.status, JSON.stringify(first.body)).toBe(201);
      await waitFor(() => gates.waitingOnAdvisory(41), { timeoutMs: 30_000, what: 'COMPLETED to be parked' });
      const terminating = call(`${node('n3').url}/v1/transfers/late-term-1/terminate`, { method: 'POST' });
      const resending = call(`${node('n1').url}/v1/transfers`, { json: body });
      // Both have had the time to meet the parked outcome (the lease runs out meanwhile: heartbeats queue too).
      await sleep(FAST_TRANSFERS.leaseMs * 2);
      await gates.release(41);
      [stopped, resend] = await Promise.all([terminating, resending]);
    } finally {
      await gates.release(41).catch(() => {});
    }
    const record = await waitForState(node('n1').url, 'late-term-1', 'COMPLETED', 30_000).catch((err) => {
      console.log(logs());
      throw err;
    });
    expect(stopped.status, `${JSON.stringify(stopped.body)}\n${JSON.stringify(record)}`).toBe(409);
    expect(stopped.body.code).toBe('ILLEGAL_TRANSITION');
    expect([200, 202], JSON.stringify(resend.body)).toContain(resend.status);
    expect(record).toMatchObject({ epoch: 1, attempts: 1 });
    await sleep(FAST_TRANSFERS.leaseMs);
    expect(await lateWrites.counts()).toEqual({ n: 500, d: 500 });
  });

  it('the store connection cut at the commit of a file transfer’s last store write: one COMPLETED, the file once, no temp left', async () => {
    await using proxy = await startTcpProxy(
      new URL(store.url).port === '' ? 5432 : Number(new URL(store.url).port),
    );
    const viaProxy = new URL(store.url);
    viaProxy.port = String(proxy.port);
    await using cutOff = await startNodeProcess({
      nodeId: 'np',
      dir: join(dir.path, 'np'),
      store: viaProxy.toString(),
      nats: nats.url,
      roots: [join(dir.path, 'files')],
    });
    const input = await writeRecords(files('cut-in.jsonl'), 500);
    const output = files('cut-out.jsonl');
    const body = fileTransfer('cut-1', input, output);
    await gates.hold(51);
    try {
      const first = await call(`${cutOff.url}/v1/transfers`, { json: body });
      expect(first.status, JSON.stringify(first.body)).toBe(201);
      await waitFor(() => gates.waitingOnAdvisory(51), {
        timeoutMs: 30_000,
        what: 'the last write to be parked',
      });
      await proxy.cut();
      // The parked statement commits now, its reply has nowhere to go.
      await gates.release(51);
      await sleep(FAST_TRANSFERS.leaseMs * 2);
    } finally {
      await gates.release(51).catch(() => {});
      await proxy.restore();
    }
    const done = await waitForState(node('n2').url, 'cut-1', 'COMPLETED', 60_000).catch((err) => {
      console.log(cutOff.child.output().slice(-6000), logs());
      throw err;
    });
    expect(done.result).toMatchObject({ recordsRead: 500, recordsWritten: 500 });
    await sleep(FAST_TRANSFERS.leaseMs * 2);
    expect(await exactlyOnce(output, 500)).toBeNull();
    const after = await call(`${node('n2').url}/v1/transfers/cut-1`);
    expect(after.body.state).toBe('COMPLETED');
    const leftovers = (await readdir(join(dir.path, 'files'))).filter((name) => name.includes('cut-out'));
    expect(leftovers, cutOff.child.output().slice(-4000)).toEqual(['cut-out.jsonl']);
    await cutOff.child.stop('SIGKILL');
  });

  it('a terminate through another node of a following transfer whose owner is paused: TERMINATED, the woken owner lands nothing', async () => {
    const input = await writeRecords(files('follow-paused-in.jsonl'), 400);
    const body = {
      id: 'follow-paused-1',
      mode: 'idempotent',
      source: { type: 'file', path: input, format: 'jsonl', follow: true },
      destination: { type: 'postgres', connection: 'followPaused', table: 'dst', key: 'id' },
      options: { follow: true },
    };
    const line = (id: number) =>
      `${JSON.stringify({ id, value: id * 1.5, category: id % 3 === 0 ? 'c' : 'a' })}\n`;
    const first = await call(`${node('n2').url}/v1/transfers`, { json: body });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    await waitFor(async () => (await followPaused.writes.counts()).n >= 400, {
      timeoutMs: 30_000,
      what: 'the snapshot of the followed file to land',
    });
    const owner = node('n2');
    owner.child.kill('SIGSTOP');
    let stopped: Awaited<ReturnType<typeof call>>;
    let atTerminate: { n: number; d: number };
    try {
      // Records the paused owner will find when it wakes up.
      for (let id = 401; id <= 450; id++) await appendFile(input, line(id));
      stopped = await call(`${node('n3').url}/v1/transfers/follow-paused-1/terminate`, { method: 'POST' });
      atTerminate = await followPaused.writes.counts();
    } finally {
      owner.child.kill('SIGCONT');
    }
    expect(stopped.status, `${JSON.stringify(stopped.body)}\n${logs()}`).toBe(200);
    expect(stopped.body.state).toBe('TERMINATED');
    for (let id = 451; id <= 500; id++) await appendFile(input, line(id));
    await sleep(FAST_TRANSFERS.leaseMs * 2);
    expect(await followPaused.writes.counts(), owner.child.output().slice(-4000)).toEqual(atTerminate);
    // Who gets the paused owner's expired lease first is a race the contract leaves open: the terminate (TERMINATED
    // at once, the snapshot's 400 rows) or a sweeper (it takes the transfer over, copies the lines appended during
    // the pause, and is then stopped by the terminate). Either way each row once, none of the lines appended after
    // TERMINATED, and nothing from the woken owner (above).
    expect(atTerminate.n).toBe(atTerminate.d);
    expect(atTerminate.d).toBeGreaterThanOrEqual(400);
    expect(atTerminate.d).toBeLessThanOrEqual(450);
    expect((await call(`${node('n1').url}/v1/transfers/follow-paused-1`)).body.state).toBe('TERMINATED');
  });

  it('an owner paused inside a sink transaction, taken over by a resubmit: the successor resumes after what it committed, each row once', async () => {
    const input = await writeRecords(files('frozen-tx-in.jsonl'), 2_000);
    const body = {
      ...fileTransfer('frozen-tx-1', input, files('unused.jsonl'), 500),
      destination: { type: 'postgres', connection: 'frozenTx', table: 'dst', key: 'id' },
    };
    const first = await call(`${node('n3').url}/v1/transfers`, { json: body });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    await waitFor(async () => (await frozenTx.writes.counts()).n >= 200, {
      timeoutMs: 30_000,
      what: 'a few commits',
    });
    const locker = new pg.Client({ connectionString: frozenTx.db.url });
    await locker.connect();
    const owner = node('n3');
    let resubmit: Awaited<ReturnType<typeof call>>;
    try {
      // Hold the sink's checkpoint row: the owner's next commit writes its batch, then waits on this lock.
      await locker.query('BEGIN');
      await locker.query('SELECT * FROM sluice_sink_checkpoints FOR UPDATE');
      await waitFor(
        async () =>
          (
            await sql<{ n: number }>(
              frozenTx.db.url,
              `SELECT count(*)::int AS n FROM pg_stat_activity
                WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO sluice_sink_checkpoints%'`,
              [frozenTx.db.name],
            )
          )[0]!.n === 1,
        { timeoutMs: 20_000, intervalMs: 20, what: 'the owner to wait inside its commit' },
      );
      // Paused inside the transaction: its statement completes once the lock goes, its COMMIT is not sent.
      owner.child.kill('SIGSTOP');
      try {
        await locker.query('COMMIT');
        await sleep(FAST_TRANSFERS.leaseMs + FAST_TRANSFERS.heartbeatMs * 2);
        resubmit = await call(`${node('n1').url}/v1/transfers`, { json: body });
        // The successor's sink waits for the paused owner's open transaction (its fence row) until the server ends
        // that session; then it reads the checkpoint the paused owner committed before.
        await waitForState(node('n1').url, 'frozen-tx-1', 'COMPLETED', 60_000);
      } finally {
        owner.child.kill('SIGCONT');
      }
    } finally {
      await locker.end().catch(() => {});
    }
    expect(resubmit.status, JSON.stringify(resubmit.body)).toBe(202);
    await sleep(FAST_TRANSFERS.leaseMs);
    const done = await call(`${node('n1').url}/v1/transfers/frozen-tx-1`);
    expect(done.body.state).toBe('COMPLETED');
    expect(done.body.result).toMatchObject({ recordsRead: 2_000, recordsWritten: 2_000 });
    expect(await frozenTx.writes.counts(), logs()).toEqual({ n: 2_000, d: 2_000 });
  });

  it('defect: a transfer with a relative destination path, taken over by a node with another working directory, was published to another file', async () => {
    // Two more nodes, each working in its own directory below the cluster's root (as the helpers start them): a
    // relative path names another file on each node, and on the cluster's nodes (working outside it) none allowed.
    const spec = (nodeId: string) => ({
      nodeId,
      dir: files(nodeId),
      store: store.url,
      nats: nats.url,
      roots: [join(dir.path, 'files')],
    });
    await using accepting = await startNodeProcess(spec('rel1'));
    await using successor = await startNodeProcess(spec('rel2'));
    const input = await writeRecords(files('relative-in.jsonl'), 3_000);
    // One resent to the other node after the owner died, one left to the sweepers.
    const resent = fileTransfer('relative-1', input, 'relative-out-1.jsonl', 600);
    const swept = fileTransfer('relative-2', input, 'relative-out-2.jsonl', 600);
    for (const body of [resent, swept]) {
      const first = await call(`${accepting.url}/v1/transfers`, { json: body });
      expect(first.status, JSON.stringify(first.body)).toBe(201);
    }
    await waitFor(
      async () =>
        ((await call(`${accepting.url}/v1/transfers/relative-2`)).body.progress?.recordsRead ?? 0) > 300,
      { timeoutMs: 30_000, what: 'the owner to be under way' },
    );
    await accepting.child.stop('SIGKILL');
    const resend = await call(`${successor.url}/v1/transfers`, { json: resent });
    expect(resend.status, JSON.stringify(resend.body)).toBe(202);
    for (const id of ['relative-1', 'relative-2']) {
      const done = await waitFor(
        async () => {
          const reply = await call(`${successor.url}/v1/transfers/${id}`);
          return ['COMPLETED', 'FAILED', 'TERMINATED'].includes(reply.body.state) ? reply.body : null;
        },
        { timeoutMs: 60_000, intervalMs: 100, what: `transfer ${id} to end` },
      );
      expect(done.state, JSON.stringify(done)).toBe('COMPLETED');
      expect(done.result, id).toMatchObject({ recordsRead: 3_000, recordsWritten: 3_000 });
    }
    // Each destination is the file the accepting node named when it answered 201 — there and nowhere else.
    for (const name of ['relative-out-1.jsonl', 'relative-out-2.jsonl'])
      expect(
        await exactlyOnce(join(files('rel1'), name), 3_000).catch((err: Error) => err.message),
        name,
      ).toBeNull();
    expect((await readdir(files('rel2'))).filter((name) => name.includes('relative-out'))).toEqual([]);
    await successor.child.stop('SIGKILL');
  });

  it('a second process started with a running node’s id: adopts nothing the live one runs, routes resubmits to it; takes over once it died', async () => {
    const input = await writeRecords(files('twin-in.jsonl'), 3_000);
    const output = files('twin-out.jsonl');
    const body = fileTransfer('twin-1', input, output, 300);
    const first = await call(`${node('n1').url}/v1/transfers`, { json: body });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    await waitFor(
      async () =>
        ((await call(`${node('n1').url}/v1/transfers/twin-1`)).body.progress?.recordsRead ?? 0) > 300,
      { timeoutMs: 30_000, what: 'the owner to be under way' },
    );
    await using twin = await startNodeProcess({
      nodeId: 'n1',
      dir: join(dir.path, 'n1-twin'),
      store: store.url,
      nats: nats.url,
      roots: [join(dir.path, 'files')],
    });
    const resend = await call(`${twin.url}/v1/transfers`, { json: body });
    expect(resend.status, JSON.stringify(resend.body)).toBe(202);
    expect(resend.body.resumed).toBe(false);
    expect(resend.body.owner.address).toBe(node('n1').url);
    const mid = await call(`${twin.url}/v1/transfers/twin-1`);
    expect(mid.body).toMatchObject({ state: 'IN_PROGRESS', epoch: 1 });
    // The first process dies: its twin (same node id, another instance) may take the transfer over, once.
    await node('n1').child.stop('SIGKILL');
    nodes.delete('n1');
    const taken = await call(`${twin.url}/v1/transfers`, { json: body });
    expect(taken.status, `${JSON.stringify(taken.body)}\n${twin.child.output().slice(-4000)}`).toBe(202);
    const done = await waitForState(twin.url, 'twin-1', 'COMPLETED', 60_000);
    expect({ epoch: done.epoch, attempts: done.attempts }).toEqual({ epoch: 2, attempts: 2 });
    expect(await exactlyOnce(output, 3_000)).toBeNull();
    await twin.child.stop('SIGKILL');
  });
});
