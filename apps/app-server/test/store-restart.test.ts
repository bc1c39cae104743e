/**
 * The store's PostgreSQL restarted (fast shutdown, then start) under two app-server nodes sharing it and a private
 * nats-server, with transfers running on both: no transfer runs twice or stays IN_PROGRESS, a submit while the store
 * is down is a retryable 503 `STORE_UNAVAILABLE`, readiness says so, and everything recovers without restarting the
 * app-servers. A private PostgreSQL (testkit's), never the machine's.
 */
import { join } from 'node:path';
import { sleep, startLogicalPostgres, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  type NodeProcess as AppNode,
  call,
  exactlyOnce,
  FAST_TRANSFERS,
  fileTransfer,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

const RECORDS = 3_000;

describe('the store restarted under a cluster', () => {
  it('store PostgreSQL restarted mid-transfers: 503 STORE_UNAVAILABLE while down, every transfer completed once after', {
    timeout: 180_000,
  }, async () => {
    await using server = await startLogicalPostgres({ walLevel: 'replica' });
    const storeUrl = await server.createDatabase('sluice_store_restart');
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-store-restart-');
    const files = join(dir.path, 'files');
    const spec = (nodeId: string) => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: storeUrl,
      nats: nats.url,
      roots: [files],
    });
    await using n1 = await startNodeProcess(spec('n1'));
    await using n2 = await startNodeProcess(spec('n2'));
    const source = await writeRecords(join(files, 'in.jsonl'), RECORDS);
    const ids = ['r-1', 'r-2', 'r-3', 'r-4'];
    const body = (id: string) => fileTransfer(id, source, join(files, `${id}.jsonl`), 600);
    const nodeOf = (i: number): AppNode => (i % 2 === 0 ? n1 : n2);
    for (const [i, id] of ids.entries())
      expect((await call(`${nodeOf(i).url}/v1/transfers`, { json: body(id) })).status).toBe(201);
    await waitFor(
      async () => {
        for (const id of ids) {
          const reply = await call(`${n1.url}/v1/transfers/${id}`);
          if (!((reply.body.progress?.recordsRead ?? 0) > 200)) return false;
        }
        return true;
      },
      { timeoutMs: 30_000, what: 'every transfer to be under way' },
    );

    await server.stop('fast');
    let outage: { submit: Awaited<ReturnType<typeof call>>; resend: Awaited<ReturnType<typeof call>> };
    try {
      const ready = await waitFor(
        async () => {
          const reply = await call(`${n2.url}/readyz`);
          return reply.status === 503 ? reply : null;
        },
        { timeoutMs: 20_000, what: 'readyz to report the store down' },
      );
      expect(ready.body.store).not.toBe('up');
      outage = {
        submit: await call(`${n1.url}/v1/transfers`, { json: body('during-outage') }),
        resend: await call(`${n2.url}/v1/transfers`, { json: body('r-1') }),
      };
      // Down for longer than a lease: no heartbeat lands, every lease has expired when the store is back.
      await sleep(FAST_TRANSFERS.leaseMs * 3);
    } finally {
      await server.start();
    }
    for (const reply of [outage.submit, outage.resend]) {
      expect({ status: reply.status, code: reply.body?.code }, JSON.stringify(reply.body)).toEqual({
        status: 503,
        code: 'STORE_UNAVAILABLE',
      });
    }

    await waitFor(async () => (await call(`${n1.url}/readyz`)).status === 200, {
      timeoutMs: 30_000,
      what: 'n1 ready again',
    });
    await waitFor(async () => (await call(`${n2.url}/readyz`)).status === 200, {
      timeoutMs: 30_000,
      what: 'n2 ready again',
    });
    // The request refused during the outage is accepted once the store is back.
    const retried = await call(`${n2.url}/v1/transfers`, { json: body('during-outage') });
    expect(retried.status, JSON.stringify(retried.body)).toBe(201);

    for (const id of [...ids, 'during-outage']) {
      const done = await waitForState(n1.url, id, 'COMPLETED', 90_000).catch((err) => {
        for (const n of [n1, n2]) console.log(n.nodeId, n.child.output().slice(-6000));
        throw err;
      });
      expect(done.result, id).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
      expect(await exactlyOnce(join(files, `${id}.jsonl`), RECORDS), id).toBeNull();
    }
    const listed = await call(`${n2.url}/v1/transfers?limit=100`);
    expect(listed.body.records.filter((r: { state: string }) => r.state !== 'COMPLETED')).toEqual([]);
    expect(n1.child.child.exitCode).toBeNull();
    expect(n2.child.child.exitCode).toBeNull();
  });
});
