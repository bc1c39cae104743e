/**
 * A transfer into an endpoint writes the cache of the host that runs it (caches are per host). Taken over by a
 * node on another host, it cannot resume from the crashed owner's checkpoint: the records before it are in the
 * other host's cache. Two real app-servers with their own data directories, a shared PostgreSQL store and NATS.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { createTestDatabase, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, type NodeProcess, startNodeProcess, writeRecords } from './helpers.js';

const TRANSFERRED = 3_000;

describe('a transfer into an endpoint, taken over by another host', () => {
  it("defect: the node that took it over resumed from the crashed owner's checkpoint — its own endpoint got only the tail, and the transfer COMPLETED", {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_app_endpoint_takeover');
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-app-endpoint-takeover-');
    const files = join(dir.path, 'files');
    const items = await writeRecords(join(files, 'items.jsonl'), 3);
    const more = join(files, 'more.jsonl');
    const lines: string[] = [];
    for (let id = 1001; id < 1001 + TRANSFERRED; id++)
      lines.push(JSON.stringify({ id, value: id, category: 'x' }));
    await writeFile(more, `${lines.join('\n')}\n`);
    const extraYaml = [
      'endpoints:',
      '  - name: items',
      `    source: { type: file, path: "${items}", format: jsonl }`,
      '    primaryKey: [id]',
      '    fields: { id: integer, value: number, category: string }',
    ].join('\n');
    const start = (nodeId: string) =>
      startNodeProcess({
        nodeId,
        dir: join(dir.path, nodeId),
        store: db.url,
        nats: nats.url,
        roots: [files],
        extraYaml,
      });
    await using owner = await start('h1');
    await using other = await start('h2');
    const records = async (node: NodeProcess) =>
      (await call(`${node.url}/v1/endpoints`)).body.endpoints.find(
        (e: { name: string }) => e.name === 'items',
      )?.records;
    await waitFor(async () => (await records(owner)) === 3 && (await records(other)) === 3, {
      timeoutMs: 30_000,
      what: 'both hosts to serve the endpoint',
    });

    const created = await call(`${owner.url}/v1/transfers`, {
      json: {
        id: 'fill-items',
        mode: 'idempotent',
        source: { type: 'file', path: more, format: 'jsonl' },
        destination: { type: 'endpoint', endpoint: 'items' },
        // Paced (≥ 3 s), so the owner dies mid-transfer with checkpoints saved.
        options: { maxRecordsPerSecond: 1_000 },
      },
    });
    expect(created.status).toBe(201);
    await waitFor(
      async () => (await call(`${other.url}/v1/transfers/fill-items`)).body.progress?.recordsWritten >= 500,
      { timeoutMs: 30_000, intervalMs: 50, what: 'the owner to write part of the transfer' },
    );
    owner.child.child.kill('SIGKILL');

    // Nobody resends it: the other node's sweeper takes it over once the lease expired.
    const done = await waitFor(
      async () => {
        const reply = await call(`${other.url}/v1/transfers/fill-items`);
        return reply.body.state === 'COMPLETED' || reply.body.state === 'FAILED' ? reply.body : null;
      },
      { timeoutMs: 60_000, intervalMs: 100, what: 'the transfer to finish on h2' },
    );
    expect(done).toMatchObject({ state: 'COMPLETED', owner: { nodeId: 'h2' } });
    expect(done.epoch).toBeGreaterThanOrEqual(2);
    // h2's endpoint holds every transferred record (the one its own source wrote too), each once by key.
    expect(await records(other)).toBe(3 + TRANSFERRED);
    const reader = await openCacheManager(join(dir.path, 'h2', 'data'), { readOnly: true });
    try {
      const cache = await reader.openRo('items');
      const missing: number[] = [];
      for (let id = 1001; id < 1001 + TRANSFERRED; id++) if (cache.get([id]) === undefined) missing.push(id);
      await cache.close();
      expect(missing.length, `first missing: ${missing.slice(0, 5).join(', ')}`).toBe(0);
    } finally {
      await reader.close();
    }
  });
});
