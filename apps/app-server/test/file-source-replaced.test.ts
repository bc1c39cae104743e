/**
 * A file source without `follow` is read once; a job then replaces it (`mv new.jsonl items.jsonl`), against real
 * app-server processes. The served generation keeps the file it read; the app-server's restart (DESIGN.md restart
 * rules: the file's fingerprint changed, so it cannot resume) builds a new generation from the file now there and
 * switches to it — what is served then equals the new file, nothing of the old one left.
 */
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startHostApiServer, startNodeProcess } from './helpers.js';
import { itemsOf } from './replication-node.js';

/** JSONL of `records`, one line each. */
const jsonl = (records: Array<Record<string, unknown>>) =>
  `${records.map((r) => JSON.stringify(r)).join('\n')}\n`;

/** Every record `items` serves on the api-server at `url`, by id. */
async function servedItems(url: string): Promise<Array<Record<string, unknown>>> {
  const reply = await call(`${url}/v1/endpoints/items/query`, {
    json: { $order_by: { id: 'asc' }, $limit: 1000 },
  });
  expect(reply.status).toBe(200);
  return reply.body.records;
}

describe('a file source replaced while it is served', () => {
  it('a replaced file (not followed) is served from the next start, as a new generation equal to the new file', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-file-replaced-');
    const path = join(dir.path, 'items.jsonl');
    const first = Array.from({ length: 30 }, (_, i) => ({ id: i + 1, v: i }));
    // The new export: some ids gone, some changed, some new.
    const second = Array.from({ length: 20 }, (_, i) => ({ id: i * 2 + 1, v: 1000 + i }));
    await writeFile(path, jsonl(first));
    const apiPort = await freePort();
    const apiUrl = `http://127.0.0.1:${apiPort}`;
    const spec = {
      ...localNode('h1', dir.path),
      extraYaml: [
        `api: { port: ${apiPort} }`,
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${path}", format: jsonl }`,
        '    primaryKey: [id]',
        '    fields: { id: integer, v: integer }',
      ].join('\n'),
    };
    let firstGeneration: string;
    {
      await using node = await startNodeProcess(spec);
      await using _api = await startHostApiServer(node);
      const loaded = await waitFor(
        async () => {
          const status = await itemsOf(node);
          return status.records === 30 && status.phase === 'completed' ? status : null;
        },
        { timeoutMs: 30_000, what: 'the first file to be served' },
      );
      firstGeneration = loaded.servingCache!;
      // Replaced by a rename while served: a file read once is not read again by this run.
      await writeFile(`${path}.new`, jsonl(second));
      await rename(`${path}.new`, path);
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      expect(await servedItems(apiUrl)).toEqual(first);
      expect(await itemsOf(node)).toMatchObject({
        servingCache: firstGeneration,
        phase: 'completed',
        error: null,
      });
    }

    await using node = await startNodeProcess(spec);
    await using _api = await startHostApiServer(node);
    const switched = await waitFor(
      async () => {
        const status = await itemsOf(node);
        return status.servingCache !== firstGeneration &&
          status.buildingCache === null &&
          status.records === 20
          ? status
          : null;
      },
      { timeoutMs: 30_000, what: 'a new generation from the replaced file' },
    );
    expect(switched.decision).toMatchObject({ decision: 'from-scratch' });
    expect(switched.decision!.reason).toContain(path);
    // The api-server follows the switch (embedded: it watches the alias table).
    await waitFor(async () => (await servedItems(apiUrl)).length === 20, {
      what: 'the api-server to switch',
    });
    expect(await servedItems(apiUrl)).toEqual(second);
  });
});
