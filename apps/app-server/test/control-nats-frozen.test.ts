/**
 * The control API of a two-node cluster (PostgreSQL store) while the nats-server is frozen (SIGSTOP: connections
 * still count as up, nothing asked of NATS is answered) for longer than a lease. The store is the source of truth:
 * a resend of a transfer the other node owns reports that owner and takes nothing over, its status is read from the
 * store, a new transfer is accepted and runs; once NATS runs again, everything completes once.
 * (A SIGKILLed nats-server is covered by cluster.test.ts; terminate with NATS stopped by console-cluster-faults.)
 */
import { join } from 'node:path';
import { createTestDatabase, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  exactlyOnce,
  FAST_TRANSFERS,
  fileTransfer,
  type HttpReply,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

describe('the control API while NATS is frozen', () => {
  it('resend, status and submit answer from the store; no takeover past a lease; each transfer completes once', {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_control_nats_frozen');
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-control-nats-frozen-');
    const spec = (nodeId: string) => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: db.url,
      nats: nats.url,
      roots: [dir.path],
      transfers: FAST_TRANSFERS,
    });
    await using a = await startNodeProcess(spec('a'));
    await using b = await startNodeProcess(spec('b'));
    const owned = fileTransfer(
      'owned-by-b',
      await writeRecords(join(dir.path, 'b-in.jsonl'), 3_000),
      join(dir.path, 'b-out.jsonl'),
      300,
    );
    expect((await call(`${b.url}/v1/transfers`, { json: owned })).status).toBe(201);
    await waitForState(b.url, 'owned-by-b', 'IN_PROGRESS');

    nats.pause();
    let resend: HttpReply;
    let status: HttpReply;
    let submitted: HttpReply;
    let resendPastLease: HttpReply;
    try {
      resend = await call(`${a.url}/v1/transfers`, { json: owned });
      status = await call(`${a.url}/v1/transfers/owned-by-b`);
      submitted = await call(`${a.url}/v1/transfers`, {
        json: fileTransfer(
          'new-on-a',
          await writeRecords(join(dir.path, 'a-in.jsonl'), 100),
          join(dir.path, 'a-out.jsonl'),
        ),
      });
      // Longer than a lease: B heartbeats to PostgreSQL, so its lease stays fresh and nobody takes over.
      await new Promise((resolve) => setTimeout(resolve, FAST_TRANSFERS.leaseMs + 500));
      resendPastLease = await call(`${a.url}/v1/transfers`, { json: owned });
    } finally {
      nats.resume();
    }
    const ownerOf = (reply: HttpReply) => ({
      status: reply.status,
      state: reply.body?.state,
      owner: reply.body?.owner?.nodeId,
      epoch: reply.body?.epoch,
    });
    expect(ownerOf(resend)).toEqual({ status: 202, state: 'IN_PROGRESS', owner: 'b', epoch: 1 });
    expect(ownerOf(status)).toEqual({ status: 200, state: 'IN_PROGRESS', owner: 'b', epoch: 1 });
    expect(ownerOf(submitted)).toEqual({ status: 201, state: 'IN_PROGRESS', owner: 'a', epoch: 1 });
    expect(ownerOf(resendPastLease)).toEqual({ status: 202, state: 'IN_PROGRESS', owner: 'b', epoch: 1 });

    const done = await waitForState(a.url, 'owned-by-b', 'COMPLETED', 60_000);
    expect([done.owner.nodeId, done.epoch, done.attempts]).toEqual(['b', 1, 1]);
    expect(await exactlyOnce(join(dir.path, 'b-out.jsonl'), 3_000)).toBeNull();
    const other = await waitForState(a.url, 'new-on-a', 'COMPLETED', 30_000);
    expect([other.owner.nodeId, other.attempts]).toEqual(['a', 1]);
    expect(await exactlyOnce(join(dir.path, 'a-out.jsonl'), 100)).toBeNull();
    expect(
      await waitFor(async () => (await call(`${a.url}/readyz`)).status === 200, {
        timeoutMs: 30_000,
        what: 'node a ready',
      }),
    ).toBe(true);
  });
});
