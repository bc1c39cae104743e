/**
 * Endpoints whose source is not there yet when the host starts — a file another job writes later — against real
 * app-server and api-server processes sharing one LMDB directory: the endpoint waits for its source (retrying with
 * back-off, saying which setting names what is missing), the api-server answers 503 `ENDPOINT_NOT_READY` meanwhile,
 * and once the source appears the endpoint serves it with no restart and no Rebuild.
 */
import { chmod, mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startHostApiServer, startNodeProcess } from './helpers.js';
import { itemsOf } from './replication-node.js';

/** The app-server's log lines (JSON) about endpoint `items`. */
function itemsLogLines(output: string): Array<Record<string, unknown>> {
  return output
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((entry) => entry.endpoint === 'items');
}

describe('an endpoint whose source file is not written yet', () => {
  it('defect: a file source missing at start-up failed for good, with a stack, until someone rebuilt it', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-source-not-ready-');
    // Not even its directory exists yet: the job that writes it has not run.
    const path = join(dir.path, 'exports', 'items.jsonl');
    const apiPort = await freePort();
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: [
        `api: { port: ${apiPort} }`,
        'endpoints:',
        `  - name: items`,
        `    source: { type: file, path: "${path}", format: jsonl }`,
        '    primaryKey: [id]',
      ].join('\n'),
    });
    await using _api = await startHostApiServer(node);
    const apiUrl = `http://127.0.0.1:${apiPort}`;

    // Waiting, not failed: the status names the setting and says the endpoint starts by itself.
    const waiting = await waitFor(
      async () => {
        const status = await itemsOf(node);
        return (status.retry?.attempts ?? 0) >= 2 ? status : null;
      },
      { timeoutMs: 20_000, what: 'a second attempt to start items' },
    );
    expect(waiting).toMatchObject({
      phase: 'retrying',
      error: { code: 'SOURCE_FAILED' },
      servingCache: null,
    });
    expect(waiting.error!.message).toContain(path);
    expect(waiting.error!.message).toContain('does not exist yet');
    expect(waiting.error!.message).toContain('endpoints[0].source.path');

    // The api-server tells clients to come back, not that the endpoint does not exist.
    const early = await call(`${apiUrl}/v1/endpoints/items/query`, { json: { $limit: 100 } });
    expect(early.status).toBe(503);
    expect(early.body).toMatchObject({ code: 'ENDPOINT_NOT_READY', endpoint: 'items' });
    expect(early.headers.get('retry-after')).toBe('1');

    // The log said it once, without a stack, however many attempts there were.
    const lines = itemsLogLines(node.child.output());
    expect(lines.filter((l) => l.msg === 'endpoint pipeline could not start for now; retrying')).toHaveLength(
      1,
    );
    expect(lines.filter((l) => l.err !== undefined || Number(l.level) >= 50)).toEqual([]);

    // The job writes the file (write, then rename into place): the endpoint serves it, no restart, no Rebuild.
    await mkdir(join(dir.path, 'exports'));
    const records = Array.from({ length: 25 }, (_, i) => ({ id: i + 1, v: (i * 7) % 11 }));
    await writeFile(`${path}.tmp`, `${records.map((r) => JSON.stringify(r)).join('\n')}\n`);
    await rename(`${path}.tmp`, path);
    const served = await waitFor(
      async () => {
        const page = await call(`${apiUrl}/v1/endpoints/items/query`, { json: { $limit: 100 } });
        return page.status === 200 && page.body.records.length === records.length ? page.body.records : null;
      },
      { timeoutMs: 30_000, what: 'items to serve the file once it is written' },
    );
    expect([...served].sort((a: { id: number }, b: { id: number }) => a.id - b.id)).toEqual(records);
    expect(await itemsOf(node)).toMatchObject({ error: null, retry: null, records: 25 });
  });

  it('a file the app-server may not read is a setting to fix: failed, naming it, then served after a Rebuild', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-source-denied-');
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, `${JSON.stringify({ id: 1, v: 2 })}\n`);
    await chmod(path, 0o000);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      withoutFileCapabilities: true,
      extraYaml: [
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${path}", format: jsonl }`,
        '    primaryKey: [id]',
      ].join('\n'),
    });
    const denied = await itemsOf(node);
    expect(denied).toMatchObject({ phase: 'failed', error: { code: 'SOURCE_FAILED' }, retry: null });
    expect(denied.error!.message).toContain('EACCES');
    expect(denied.error!.message).toContain('endpoints[0].source.path');

    await chmod(path, 0o644);
    const rebuilt = await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' });
    expect(rebuilt.status).toBe(202);
    await waitFor(async () => (await itemsOf(node)).records === 1, { what: 'items to serve once readable' });
    expect(await itemsOf(node)).toMatchObject({ error: null, retry: null });
  });

  it('defect: a followed file gone from its path logged a stack on every retry; it is served again once back', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-source-gone-');
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, `${JSON.stringify({ id: 1, v: 1 })}\n${JSON.stringify({ id: 2, v: 2 })}\n`);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: [
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${path}", format: jsonl, follow: true }`,
        '    primaryKey: [id]',
        '    fields: { id: integer, v: integer }',
      ].join('\n'),
    });
    const serving = await waitFor(
      async () => {
        const status = await itemsOf(node);
        return status.records === 2 && status.phase === 'streaming' ? status.servingCache : null;
      },
      { what: 'items to follow its file' },
    );

    // Moved away by a job that writes the next one: retried, the generation read so far still served.
    await rename(path, `${path}.old`);
    const waiting = await waitFor(
      async () => {
        const status = await itemsOf(node);
        return (status.retry?.attempts ?? 0) >= 3 ? status : null;
      },
      { timeoutMs: 30_000, what: 'three attempts to read the file again' },
    );
    expect(waiting).toMatchObject({ phase: 'retrying', servingCache: serving, records: 2 });
    const stacks = itemsLogLines(node.child.output()).filter((l) => l.err !== undefined);
    // One for the run that lost its file, one for the first attempt that found none: not one per attempt.
    expect(stacks.map((l) => (l.err as { message: string }).message)).toEqual([
      expect.stringContaining(`File ${path} disappeared`),
      expect.stringContaining(`Cannot read file ${path}: it does not exist yet`),
    ]);

    const next = [
      { id: 2, v: 20 },
      { id: 3, v: 30 },
    ];
    await writeFile(path, `${next.map((r) => JSON.stringify(r)).join('\n')}\n`);
    await waitFor(
      async () => {
        const status = await itemsOf(node);
        return status.servingCache !== serving && status.records === 2 && status.phase === 'streaming';
      },
      { timeoutMs: 60_000, what: 'a generation of the new file' },
    );
  });
});
