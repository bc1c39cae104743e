/**
 * A transfer's `progress` as any node of a cluster answers it: behind a load balancer a client's GET lands on any
 * node, and only the owner knows how far the run is — the others ask it over the backplane.
 */
import { join } from 'node:path';
import { createTestDatabase, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, fileTransfer, startNodeProcess, writeRecords } from './helpers.js';

describe('transfer progress on every node', () => {
  it("defect: a transfer's progress was null on every node but its owner", { timeout: 120_000 }, async () => {
    await using db = await createTestDatabase('sluice_progress');
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-progress-');
    const roots = [join(dir.path, 'files')];
    const start = (nodeId: string) =>
      startNodeProcess({ nodeId, dir: join(dir.path, nodeId), store: db.url, nats: nats.url, roots });
    await using owner = await start('p1');
    await using other = await start('p2');
    const source = await writeRecords(join(dir.path, 'files', 'in.jsonl'), 2_000);
    // 40 records a second: it runs for the whole test, mid-transfer throughout.
    const submitted = await call(`${owner.url}/v1/transfers`, {
      method: 'POST',
      json: fileTransfer('slow-1', source, join(dir.path, 'files', 'out.jsonl'), 40),
    });
    expect(submitted.status).toBe(201);
    const seen = await waitFor(
      async () => {
        const reply = await call(`${other.url}/v1/transfers/slow-1`);
        const progress = reply.body.progress as { recordsRead: number } | null;
        return reply.status === 200 && progress !== null && progress.recordsRead > 0 ? reply.body : null;
      },
      // Before: progress stayed null on p2 (timed out), while p1 showed it.
      { timeoutMs: 20_000, intervalMs: 200, what: 'p2 to show the progress of the transfer p1 runs' },
    );
    expect(seen).toMatchObject({
      state: 'IN_PROGRESS',
      owner: { nodeId: 'p1' },
      progress: { phase: expect.any(String), recordsRead: expect.any(Number), rate: expect.any(Number) },
    });
    // The owner's own answer has the same shape.
    const own = await call(`${owner.url}/v1/transfers/slow-1`);
    expect(Object.keys(own.body.progress as object).sort()).toEqual(
      Object.keys(seen.progress as object).sort(),
    );
    expect((await call(`${other.url}/v1/transfers/slow-1/terminate`, { method: 'POST' })).status).toBe(200);
  });
});
