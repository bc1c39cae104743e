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

  it("defect: the transfer list (the console's table) showed progress only for the transfers of the node asked", {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_progress_list');
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-progress-list-');
    const roots = [join(dir.path, 'files')];
    const start = (nodeId: string) =>
      startNodeProcess({ nodeId, dir: join(dir.path, nodeId), store: db.url, nats: nats.url, roots });
    await using owner = await start('l1');
    await using other = await start('l2');
    const source = await writeRecords(join(dir.path, 'files', 'in.jsonl'), 2_000);
    // Two slow transfers on l1 (mid-transfer throughout), listed through l2.
    for (const id of ['list-1', 'list-2']) {
      const submitted = await call(`${owner.url}/v1/transfers`, {
        method: 'POST',
        json: fileTransfer(id, source, join(dir.path, 'files', `${id}.jsonl`), 40),
      });
      expect(submitted.status).toBe(201);
    }
    type Listed = { id: string; owner: { nodeId: string }; progress: { recordsRead: number } | null };
    const listed = await waitFor(
      async () => {
        const reply = await call(`${other.url}/v1/transfers?state=IN_PROGRESS`);
        const records = (reply.body.records ?? []) as Listed[];
        return records.length === 2 && records.every((r) => r.progress !== null && r.progress.recordsRead > 0)
          ? records
          : null;
      },
      // Before: progress stayed null in l2's list (timed out) while GET of each showed it.
      {
        timeoutMs: 20_000,
        intervalMs: 200,
        what: "l2's list to show the progress of both transfers l1 runs",
      },
    );
    expect(listed.map((r) => [r.id, r.owner.nodeId]).sort()).toEqual([
      ['list-1', 'l1'],
      ['list-2', 'l1'],
    ]);
    for (const id of ['list-1', 'list-2'])
      expect((await call(`${other.url}/v1/transfers/${id}/terminate`, { method: 'POST' })).status).toBe(200);
  });
});
