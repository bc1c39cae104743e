/**
 * `GET /v1/transfers` pages as large as the operator allowed (`http.pageSizeMax`), through a real app-server.
 */
import { join } from 'node:path';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, fileTransfer, localNode, startNodeProcess, waitForState, writeRecords } from './helpers.js';

describe('transfer list', { timeout: 90_000 }, () => {
  it('defect: a page larger than 1 000 was refused (400 at "limit") though http.pageSizeMax allowed it', async () => {
    await using dir = await tempDir('sluice-transfer-list-');
    await using node = await startNodeProcess({
      ...localNode('solo', dir.path),
      extraYaml: 'http: { pageSizeMax: 2000 }',
    });
    const source = await writeRecords(join(dir.path, 'in.jsonl'), 3);
    for (const id of ['a', 'b', 'c']) {
      const created = await call(`${node.url}/v1/transfers`, {
        json: fileTransfer(id, source, join(dir.path, `${id}.jsonl`)),
      });
      expect(created.status).toBe(201);
      await waitForState(node.url, id, 'COMPLETED');
    }

    const page = await call(`${node.url}/v1/transfers?limit=1500`);
    expect(page.status, JSON.stringify(page.body)).toBe(200);
    expect(page.body.records.map((r: { id: string }) => r.id)).toEqual(['a', 'b', 'c']);
    expect(page.body.next).toBeNull();
    const largest = await call(`${node.url}/v1/transfers?limit=2000&state=COMPLETED`);
    expect(largest.status, JSON.stringify(largest.body)).toBe(200);
    expect(largest.body.records).toHaveLength(3);
    // Beyond the configured bound: the caller's 400, at the query parameter.
    const over = await call(`${node.url}/v1/transfers?limit=2001`);
    expect(over.status).toBe(400);
    expect(over.body.errors.map((e: { path: string }) => e.path)).toEqual(['querystring.limit']);
  });
});
