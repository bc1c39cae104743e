/**
 * Three real app-server processes sharing a fresh PostgreSQL database and a private nats-server: the
 * idempotence protocol, takeover after SIGKILL, the sweeper, fencing of a frozen owner, and NATS outages.
 */
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { SqlDataPlaneStore } from '@sluice/store';
import { openStore } from '@sluice/store';
import {
  createTestDatabase,
  type NatsServerHandle,
  startNatsServer,
  type TempDir,
  type TestDatabase,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  call,
  exactlyOnce,
  FAST_TRANSFERS,
  fileTransfer,
  type NodeProcess,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

let db: TestDatabase;
let nats: NatsServerHandle;
let dir: TempDir;
let store: SqlDataPlaneStore;
const nodes = new Map<string, NodeProcess>();

async function startNode(nodeId: string): Promise<NodeProcess> {
  const node = await startNodeProcess({
    nodeId,
    dir: join(dir.path, nodeId),
    store: db.url,
    nats: nats.url,
    roots: [join(dir.path, 'files')],
  });
  nodes.set(nodeId, node);
  return node;
}

function node(nodeId: string): NodeProcess {
  const found = nodes.get(nodeId);
  if (!found) throw new Error(`node ${nodeId} is not running`);
  return found;
}

const files = (name: string) => join(dir.path, 'files', name);

/** Waits until the running owner has committed at least one checkpoint (it is mid-transfer). */
async function waitForCheckpoint(id: string) {
  return waitFor(
    async () => {
      const record = await store.get(id);
      return record?.checkpoint && record.state === 'IN_PROGRESS' ? record : null;
    },
    { timeoutMs: 20_000, intervalMs: 50, what: `a checkpoint of ${id}` },
  );
}

beforeAll(async () => {
  db = await createTestDatabase('sluice_app');
  nats = await startNatsServer();
  dir = await tempDir('sluice-app-cluster-');
  store = await openStore(db.url);
  // Four nodes up front: the tests kill two of them rather than paying for restarts.
  await Promise.all(['n1', 'n2', 'n3', 'n4'].map(startNode));
}, 120_000);

afterAll(async () => {
  await Promise.allSettled([...nodes.values()].map((n) => n.child.stop('SIGKILL')));
  await store?.[Symbol.asyncDispose]();
  await nats?.[Symbol.asyncDispose]();
  await db?.[Symbol.asyncDispose]();
  await dir?.[Symbol.asyncDispose]();
});

describe('app-server cluster (PostgreSQL + NATS)', { timeout: 90_000 }, () => {
  it('100 concurrent submits of one id over 3 nodes → one run, one owner, each record once', async () => {
    const source = await writeRecords(files('burst-in.jsonl'), 3_000);
    const destination = files('burst-out.jsonl');
    // Throttled to ~3 s, so every one of the 100 replies sees it running (none may see it finished).
    const body = fileTransfer('burst-1', source, destination, 1_000);
    const urls = ['n1', 'n2', 'n3'].map((id) => node(id).url);
    const replies = await Promise.all(
      Array.from({ length: 100 }, (_, i) => call(`${urls[i % 3]}/v1/transfers`, { json: body })),
    );
    const statuses = replies.map((r) => r.status);
    expect(
      statuses.every((s) => s === 201 || s === 202 || s === 200),
      JSON.stringify(statuses),
    ).toBe(true);
    expect(statuses.filter((s) => s === 201)).toHaveLength(1);
    const created = replies.find((r) => r.status === 201)!;
    expect(created.body.state).toBe('IN_PROGRESS');
    const owner = created.body.owner.nodeId;
    for (const reply of replies) {
      expect(reply.body.owner.nodeId, JSON.stringify(reply.body)).toBe(owner);
      if (reply.status === 202) expect(reply.body.resumed).toBe(false);
    }
    const done = await waitForState(urls[0]!, 'burst-1', 'COMPLETED');
    expect(done.attempts).toBe(1);
    expect(done.epoch).toBe(1);
    expect(done.owner.nodeId).toBe(owner);
    expect(done.result).toMatchObject({ recordsRead: 3_000, recordsWritten: 3_000 });
    expect(await exactlyOnce(destination, 3_000)).toBeNull();
    // A late duplicate gets the stored outcome; the same key with another body is a conflict.
    const again = await call(`${urls[1]}/v1/transfers`, { json: body });
    expect(again.status).toBe(200);
    expect(again.body.result.recordsWritten).toBe(3_000);
    const conflict = await call(`${urls[2]}/v1/transfers`, {
      json: { ...body, properties: { other: true } },
    });
    expect(conflict.status).toBe(422);
    expect(conflict.body.code).toBe('IDEMPOTENCY_CONFLICT');
  });

  it('SIGKILL the owner mid-transfer, resubmit elsewhere → taken over (resumed), completed once', async () => {
    const source = await writeRecords(files('kill-in.jsonl'), 3_000);
    const destination = files('kill-out.jsonl');
    const body = fileTransfer('kill-1', source, destination, 1_000);
    const first = await call(`${node('n1').url}/v1/transfers`, { json: body });
    expect(first.status).toBe(201);
    expect(first.body.owner.nodeId).toBe('n1');
    const before = await waitForCheckpoint('kill-1');
    await node('n1').child.stop('SIGKILL');
    nodes.delete('n1');
    const started = Date.now();
    const resubmit = await call(`${node('n2').url}/v1/transfers`, { json: body });
    expect(resubmit.status).toBe(202);
    // On failure, say which answer n2 acted on (the reply and its last log lines name the backplane's answer).
    expect(
      resubmit.body.resumed,
      `${JSON.stringify(resubmit.body)}\n${node('n2').child.lines.slice(-5).join('\n')}`,
    ).toBe(true);
    expect(resubmit.body.owner.nodeId).toBe('n2');
    expect(resubmit.body.epoch).toBe(before.epoch + 1);
    // Taken over at once (NATS answered "nobody"), not after the lease.
    expect(Date.now() - started).toBeLessThan(FAST_TRANSFERS.leaseMs);
    const done = await waitForState(node('n2').url, 'kill-1', 'COMPLETED');
    expect(done.attempts).toBe(2);
    expect(done.owner.nodeId).toBe('n2');
    expect(await exactlyOnce(destination, 3_000)).toBeNull();
  });

  it('with nobody resubmitting, a sweeper recovers a dead owner’s transfer and completes it', async () => {
    const source = await writeRecords(files('sweep-in.jsonl'), 3_000);
    const destination = files('sweep-out.jsonl');
    const first = await call(`${node('n4').url}/v1/transfers`, {
      json: fileTransfer('sweep-1', source, destination, 1_000),
    });
    expect(first.status).toBe(201);
    await waitForCheckpoint('sweep-1');
    await node('n4').child.stop('SIGKILL');
    nodes.delete('n4');
    const done = await waitForState(node('n2').url, 'sweep-1', 'COMPLETED', 40_000);
    expect(['n2', 'n3']).toContain(done.owner.nodeId);
    expect(done.attempts).toBe(2);
    expect(await exactlyOnce(destination, 3_000)).toBeNull();
  });

  it('a frozen owner (SIGSTOP past its lease) cannot write after the takeover once resumed', async () => {
    const source = await writeRecords(files('freeze-in.jsonl'), 3_000);
    const destination = files('freeze-out.jsonl');
    const first = await call(`${node('n2').url}/v1/transfers`, {
      json: fileTransfer('freeze-1', source, destination, 1_000),
    });
    expect(first.status).toBe(201);
    await waitForCheckpoint('freeze-1');
    const frozen = node('n2');
    frozen.child.kill('SIGSTOP');
    try {
      const done = await waitForState(node('n3').url, 'freeze-1', 'COMPLETED', 40_000);
      expect(done.owner.nodeId).toBe('n3');
      expect(done.epoch).toBe(2);
      expect(await exactlyOnce(destination, 3_000)).toBeNull();
      const bytes = await readFile(destination);
      const { mtimeMs } = await stat(destination);
      frozen.child.kill('SIGCONT');
      await frozen.child.waitForLine(/no longer owns/, 20_000);
      // Give the resumed process time to try anything it still had in flight.
      await waitFor(async () => (await call(`${frozen.url}/healthz`)).status === 200, { timeoutMs: 10_000 });
      const after = await store.get('freeze-1');
      expect(after?.state).toBe('COMPLETED');
      expect(after?.epoch).toBe(2);
      expect(after?.ownerNodeId).toBe(done.owner.nodeId);
      expect((await readFile(destination)).equals(bytes)).toBe(true);
      expect((await stat(destination)).mtimeMs).toBe(mtimeMs);
    } finally {
      frozen.child.kill('SIGCONT');
    }
  });

  it('a hung owner (SIGSTOP, lease still fresh): a resubmit leaves it alone, a terminate waits for its lease and the woken owner publishes nothing', async () => {
    // The owner's lease, not the owner wait, decides: a silent owner may only be busy (issue 13, defect 3).
    const lease = { leaseMs: 4_000, heartbeatMs: 1_000, ownerWaitMs: 500, sweepIntervalMs: 60_000 };
    // Its own database: these two nodes must not show up in the other tests' cluster.
    await using hungDb = await createTestDatabase('sluice_app_hung');
    await using hungStore = await openStore(hungDb.url);
    const spec = (nodeId: string) => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: hungDb.url,
      nats: nats.url,
      roots: [join(dir.path, 'files')],
      transfers: lease,
    });
    const [h1, h2] = await Promise.all([startNodeProcess(spec('h1')), startNodeProcess(spec('h2'))]);
    try {
      const source = await writeRecords(files('hung-in.jsonl'), 3_000);
      const destination = files('hung-out.jsonl');
      const stoppedDestination = files('hung-2-out.jsonl');
      const body = fileTransfer('hung-1', source, destination, 1_000);
      const stopBody = fileTransfer('hung-2', source, stoppedDestination, 200);
      expect((await call(`${h1.url}/v1/transfers`, { json: body })).status).toBe(201);
      expect((await call(`${h1.url}/v1/transfers`, { json: stopBody })).status).toBe(201);
      await waitFor(
        async () => {
          const record = await hungStore.get('hung-1');
          return record?.checkpoint && record.state === 'IN_PROGRESS' ? record : null;
        },
        { timeoutMs: 30_000, what: 'hung-1 to commit a checkpoint' },
      );
      h1.child.kill('SIGSTOP');
      try {
        const frozen = await hungStore.get('hung-2');
        // A resubmit does not take a silent owner's transfer over while its lease is fresh (it may only be busy).
        const resubmit = await call(`${h2.url}/v1/transfers`, { json: body });
        expect(resubmit.status).toBe(202);
        expect(resubmit.body).toMatchObject({ resumed: false, owner: { nodeId: 'h1' }, epoch: 1 });

        // A terminate waits for the frozen owner's lease, then terminates and takes it over in one statement.
        const terminated = await call(`${h2.url}/v1/transfers/hung-2/terminate`, { method: 'POST' });
        const answeredAt = Date.now();
        expect(terminated.status).toBe(200);
        expect(terminated.body).toMatchObject({ state: 'TERMINATED', epoch: 2, owner: { nodeId: 'h2' } });
        expect(answeredAt).toBeGreaterThanOrEqual(
          frozen?.leaseExpiresAt?.getTime() ?? Number.POSITIVE_INFINITY,
        );

        h1.child.kill('SIGCONT');
        // The woken owner finds its leases lost and stops; what was taken from it stays taken.
        await h1.child.waitForLine(/no longer owns|fenced/, 20_000);
        const done = await waitForState(h2.url, 'hung-1', 'COMPLETED', 40_000);
        expect(done.owner).toMatchObject({ nodeId: expect.stringMatching(/^h[12]$/) });
        expect(await exactlyOnce(destination, 3_000)).toBeNull();
        // The terminated transfer's destination was never published, by the woken owner or anyone.
        expect(
          await stat(stoppedDestination).then(
            () => true,
            () => false,
          ),
        ).toBe(false);
        expect(await hungStore.get('hung-2')).toMatchObject({ state: 'TERMINATED', epoch: 2 });
      } finally {
        h1.child.kill('SIGCONT');
      }
    } finally {
      await Promise.allSettled([h1.child.stop('SIGKILL'), h2.child.stop('SIGKILL')]);
    }
  }, 90_000);

  it('NATS down: no false takeover while leases are fresh, readyz reports it, recovery after restart', async () => {
    const source = await writeRecords(files('nats-in.jsonl'), 4_000);
    const destination = files('nats-out.jsonl');
    const body = fileTransfer('nats-1', source, destination, 800);
    const first = await call(`${node('n3').url}/v1/transfers`, { json: body });
    expect(first.status).toBe(201);
    await waitForCheckpoint('nats-1');
    await nats.stop();
    try {
      await waitFor(async () => (await call(`${node('n2').url}/readyz`)).status === 503, {
        timeoutMs: 10_000,
        what: 'readyz to report the backplane down',
      });
      const ready = await call(`${node('n2').url}/readyz`);
      expect(ready.body.store).toBe('up');
      expect(ready.body.backplane).not.toBe('up');
      const resubmit = await call(`${node('n2').url}/v1/transfers`, { json: body });
      expect(resubmit.status).toBe(202);
      expect(resubmit.body.resumed).toBe(false);
      expect(resubmit.body.owner.nodeId).toBe('n3');
      // Longer than a lease: heartbeats go to PostgreSQL, so the owner keeps it and nobody takes over.
      await new Promise((resolve) => setTimeout(resolve, FAST_TRANSFERS.leaseMs + 500));
      const during = await store.get('nats-1');
      expect(during?.epoch).toBe(1);
      expect(during?.ownerNodeId).toBe('n3');
      const again = await call(`${node('n2').url}/v1/transfers`, { json: body });
      expect([200, 202]).toContain(again.status);
      expect(again.body.owner.nodeId).toBe('n3');
    } finally {
      await nats.start();
    }
    await waitFor(async () => (await call(`${node('n2').url}/readyz`)).status === 200, {
      timeoutMs: 20_000,
      what: 'readyz to recover',
    });
    const done = await waitForState(node('n3').url, 'nats-1', 'COMPLETED', 30_000);
    expect(done.attempts).toBe(1);
    expect(done.owner.nodeId).toBe('n3');
    expect(await exactlyOnce(destination, 4_000)).toBeNull();
    const owner = await call(`${node('n2').url}/v1/transfers/nats-1`);
    expect(owner.body.state).toBe('COMPLETED');
  });

  it('the store and NATS restarting under load: no transfer lost or duplicated', async () => {
    const ids = Array.from({ length: 6 }, (_, i) => `load-${i}`);
    const source = await writeRecords(files('load-in.jsonl'), 2_000);
    const urls = ['n2', 'n3', 'n2'].map((id) => node(id).url);
    const replies = await Promise.all(
      ids.map((id, i) =>
        call(`${urls[i % 3]}/v1/transfers`, { json: fileTransfer(id, source, files(`${id}.jsonl`), 700) }),
      ),
    );
    expect(replies.map((r) => r.status)).toEqual(ids.map(() => 201));
    await Promise.all(ids.map(waitForCheckpoint));
    const killConnections = async () => {
      const admin = new pg.Client({ connectionString: db.url });
      await admin.connect();
      try {
        const { rowCount } = await admin.query(
          'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
          [db.name],
        );
        return rowCount ?? 0;
      } finally {
        await admin.end();
      }
    };
    expect(await killConnections()).toBeGreaterThan(0);
    await nats.restart();
    // Again, once the nodes have reconnected.
    await waitFor(async () => (await killConnections()) > 0, { timeoutMs: 10_000, intervalMs: 100 });
    for (const id of ids) {
      const done = await waitForState(urls[0]!, id, 'COMPLETED', 60_000).catch((err) => {
        for (const n of nodes.values()) console.log(n.nodeId, n.child.output().slice(-4000));
        throw err;
      });
      expect(done.result.recordsWritten, id).toBe(2_000);
      expect(await exactlyOnce(files(`${id}.jsonl`), 2_000), id).toBeNull();
    }
    const listed = await call(`${urls[1]}/v1/transfers?limit=500`).catch((err) => {
      for (const n of nodes.values())
        console.log(
          n.nodeId,
          n.child.lines
            .filter((l) => !l.includes('"level":30'))
            .join('\n')
            .slice(-5000),
        );
      throw err;
    });
    const loadRecords = listed.body.records.filter((r: { id: string }) => r.id.startsWith('load-'));
    expect(loadRecords.map((r: { id: string }) => r.id).sort()).toEqual(ids);
    await waitFor(async () => (await call(`${urls[2]}/readyz`)).status === 200, { timeoutMs: 20_000 });
  }, 120_000);

  it('lists transfers by state and owner, pages with a cursor, and shows the nodes', async () => {
    const page1 = await call(`${node('n2').url}/v1/transfers?state=COMPLETED&limit=2`);
    expect(page1.status).toBe(200);
    expect(page1.body.records).toHaveLength(2);
    expect(page1.body.next).toEqual(expect.any(String));
    const page2 = await call(
      `${node('n2').url}/v1/transfers?state=COMPLETED&limit=2&cursor=${encodeURIComponent(page1.body.next)}`,
    );
    const ids = [...page1.body.records, ...page2.body.records].map((r: { id: string }) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    const byOwner = await call(`${node('n2').url}/v1/transfers?owner=n2`);
    expect(byOwner.body.records.length).toBeGreaterThan(0);
    expect(byOwner.body.records.every((r: { owner: { nodeId: string } }) => r.owner.nodeId === 'n2')).toBe(
      true,
    );
    const nodesReply = await call(`${node('n2').url}/v1/nodes`);
    const members = nodesReply.body.nodes as Array<{ nodeId: string; alive: boolean }>;
    expect(members.map((n) => n.nodeId).sort()).toEqual(['n1', 'n2', 'n3', 'n4']);
    expect(
      members
        .filter((n) => n.alive)
        .map((n) => n.nodeId)
        .sort(),
    ).toEqual(['n2', 'n3']);
    const metrics = await call(`${node('n2').url}/metrics`);
    expect(metrics.body).toMatch(/sluice_submits_total\{outcome="created"\} \d+/);
  });

  it('terminate is routed to the owner; the record turns TERMINATED once the work stopped', async () => {
    const source = await writeRecords(files('term-in.jsonl'), 5_000);
    const first = await call(`${node('n3').url}/v1/transfers`, {
      json: fileTransfer('term-1', source, files('term-out.jsonl'), 500),
    });
    expect(first.body.owner.nodeId).toBe('n3');
    expect(first.status).toBe(201);
    await waitForCheckpoint('term-1');
    const reply = await call(`${node('n2').url}/v1/transfers/term-1/terminate`, { method: 'POST' });
    expect(reply.status).toBe(200);
    expect(reply.body.state).toBe('TERMINATED');
    expect((await store.get('term-1'))?.state).toBe('TERMINATED');
    await node('n3').child.waitForLine(/transfer terminated/, 5_000);
    const again = await call(`${node('n2').url}/v1/transfers`, {
      json: fileTransfer('term-1', source, files('term-out.jsonl'), 500),
    });
    expect(again.status).toBe(200);
    expect(again.body.state).toBe('TERMINATED');
  });
});
