/**
 * Faults of the one app-server of an embedded host (SQLite store, no NATS): SIGKILLed in the middle of a
 * file → PostgreSQL transfer, and frozen (SIGSTOP) for longer than its lease in the middle of a file → file one.
 * Exactly once either way: the destination's physical writes are counted, and a resend returns the stored outcome.
 */
import { join } from 'node:path';
import { createTestDatabase, freePort, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  createCountedDestination,
  exactlyOnce,
  FAST_TRANSFERS,
  fileTransfer,
  localNode,
  startHostApiServer,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

const RECORDS = 3_000;

describe('embedded app-server faults', { timeout: 60_000 }, () => {
  it('SIGKILLed mid file → PostgreSQL transfer and restarted: completed, each row written once, the resend answers the outcome', async () => {
    await using dir = await tempDir('sluice-embedded-kill-');
    await using db = await createTestDatabase('sluice_embedded_kill');
    const writes = await createCountedDestination(db.url);
    const spec = {
      ...localNode('solo', dir.path),
      extraYaml: `connections: { wh: { type: postgres, url: "${db.url}" } }`,
    };
    const source = await writeRecords(join(dir.path, 'in.jsonl'), RECORDS);
    const body = {
      ...fileTransfer('kill-pg-1', source, join(dir.path, 'unused.jsonl'), 1_000),
      destination: { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' },
    };
    const first = await startNodeProcess(spec);
    try {
      expect((await call(`${first.url}/v1/transfers`, { json: body })).status).toBe(201);
      // Killed once some rows landed and before all did: the kill must hit the middle of the run.
      await waitFor(async () => (await writes.counts()).n >= 300, {
        timeoutMs: 20_000,
        what: 'rows to land',
      });
      await first.child.stop('SIGKILL');
    } finally {
      await first[Symbol.asyncDispose]();
    }
    const atKill = (await writes.counts()).n;
    expect(atKill).toBeLessThan(RECORDS);

    await using second = await startNodeProcess(spec);
    const resend = await call(`${second.url}/v1/transfers`, { json: body });
    expect([200, 202]).toContain(resend.status);
    const done = await waitForState(second.url, 'kill-pg-1', 'COMPLETED');
    expect(done.epoch).toBe(2);
    expect(done.result.recordsWritten).toBe(RECORDS);
    expect(await writes.counts()).toEqual({ n: RECORDS, d: RECORDS });
    const again = await call(`${second.url}/v1/transfers`, { json: body });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ state: 'COMPLETED', epoch: 2, result: { recordsWritten: RECORDS } });
    expect(await writes.counts()).toEqual({ n: RECORDS, d: RECORDS });
  });

  it('frozen (SIGSTOP) past its lease mid file → file transfer, then thawed: completed once, each record once', async () => {
    await using dir = await tempDir('sluice-embedded-stop-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    const source = await writeRecords(join(dir.path, 'in.jsonl'), RECORDS);
    const destination = join(dir.path, 'out.jsonl');
    const body = fileTransfer('stop-1', source, destination, 1_000);
    expect((await call(`${node.url}/v1/transfers`, { json: body })).status).toBe(201);
    await waitFor(
      async () => {
        const reply = await call(`${node.url}/v1/transfers/stop-1`);
        return (reply.body.progress?.recordsWritten ?? 0) > 0;
      },
      { timeoutMs: 20_000, what: 'the transfer to make progress' },
    );
    node.child.child.kill('SIGSTOP');
    try {
      // Twice the lease: on waking, the node finds its own lease expired (on the store's clock).
      await new Promise((r) => setTimeout(r, FAST_TRANSFERS.leaseMs * 2));
    } finally {
      node.child.child.kill('SIGCONT');
    }
    const done = await waitForState(node.url, 'stop-1', 'COMPLETED');
    expect(done.result.recordsWritten).toBe(RECORDS);
    expect(await exactlyOnce(destination, RECORDS)).toBeNull();
    const again = await call(`${node.url}/v1/transfers`, { json: body });
    expect(again.status).toBe(200);
    expect(again.body.state).toBe('COMPLETED');
  });
  it("SIGKILLed in its endpoint's first snapshot: the api-server says why it cannot serve yet, the restart continues the build", {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-embedded-snapshot-');
    // Large enough that the kill lands inside the snapshot even on a loaded machine.
    const count = 60_000;
    const source = await writeRecords(join(dir.path, 'items.jsonl'), count);
    const apiPort = await freePort();
    const spec = {
      ...localNode('solo', dir.path),
      extraYaml: [
        `api: { port: ${apiPort} }`,
        'endpoints:',
        `  - { name: items, source: { type: file, path: "${source}", format: jsonl }, primaryKey: [id], indexes: [[category]] }`,
      ].join('\n'),
    };
    const api = `http://127.0.0.1:${apiPort}`;
    const first = await startNodeProcess(spec);
    await using apiServer = await startHostApiServer(first);
    try {
      // Killed once part of the first generation is written (a commit every 50 records: many checkpoints).
      await waitFor(
        async () => {
          const [endpoint] = (await call(`${first.url}/v1/endpoints`)).body.endpoints;
          return endpoint.phase === 'snapshotting' && (endpoint.building?.records ?? 0) > 0;
        },
        { timeoutMs: 20_000, intervalMs: 20, what: 'the first snapshot to be under way' },
      );
      await first.child.stop('SIGKILL');
    } finally {
      await first[Symbol.asyncDispose]();
    }
    // Nothing serves yet, and the api-server says so (a partial first generation is never exposed).
    const notYet = await call(`${api}/v1/endpoints/items/records/1`);
    expect(notYet.status).toBe(503);
    expect(notYet.body.code).toBe('ENDPOINT_NOT_READY');

    await using second = await startNodeProcess(spec);
    const served = await waitFor(
      async () => {
        const [endpoint] = (await call(`${second.url}/v1/endpoints`)).body.endpoints;
        return endpoint.servingCache !== null && endpoint.phase === 'completed' ? endpoint : null;
      },
      { timeoutMs: 45_000, what: 'the first generation to serve' },
    );
    expect(served.decision.decision).toBe('resume');
    expect(served.records).toBe(count);
    const counted = await waitFor(
      async () => {
        const reply = await call(`${api}/v1/endpoints/items/count`, { json: {} });
        return reply.status === 200 ? reply.body.count : null;
      },
      { timeoutMs: 20_000, what: 'the api-server to serve the endpoint' },
    );
    expect(counted).toBe(count);
    const c = await call(`${api}/v1/endpoints/items/count`, { json: { $filter: { category: 'c' } } });
    expect(c.body.count).toBe(Math.floor(count / 3));
    expect((await call(`${api}/v1/endpoints/items/records/${count}`)).body).toEqual({
      id: count,
      value: count * 1.5,
      category: count % 3 === 0 ? 'c' : 'a',
    });
    expect(apiServer.child.exitCode).toBeNull();
  });
});
