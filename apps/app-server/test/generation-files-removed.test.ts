/**
 * An operator (or a disk clean-up, or a bad restore) removed or overwrote the files of the generation an endpoint's
 * alias points at while the host was down. Nothing can be continued from files that are gone or are not LMDB any
 * more, so on start the app-server must treat it as restart case 4 — rebuild the endpoint from its source into a
 * new generation and switch to it — instead of leaving the endpoint failed, pointing at nothing, or crashing. The
 * host's api-server then serves the rebuilt generation without a restart.
 */
import { rm, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, spawnTs, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIN, call, localNode, type NodeSpec, startHostApiServer, startNodeProcess } from './helpers.js';
import { itemsOf } from './replication-node.js';

const RECORDS = 100;
/** What an operator's mistake or a bad restore leaves in place of a generation's data file. */
const overwrite = (generation: string) => writeFile(join(generation, 'data.mdb'), Buffer.alloc(64 * 1024, 7));

/**
 * Builds endpoint `items` (a file of {@link RECORDS} records) on a node under `root`, stops the node and lets
 * `damage` do its worst to the directory of the generation that served. Resolves with the node's spec (its port
 * kept), that generation's name and the host's api-server port.
 */
async function buildThenDamage(root: string, damage: (generationDir: string) => Promise<void>) {
  const source = join(root, 'items.jsonl');
  await writeFile(
    source,
    Array.from({ length: RECORDS }, (_, i) => `${JSON.stringify({ id: i + 1, v: i * 2 })}\n`).join(''),
  );
  const apiPort = await freePort();
  const spec: NodeSpec = {
    ...localNode('h1', root),
    extraYaml: [
      `api: { port: ${apiPort} }`,
      'endpoints:',
      '  - name: items',
      `    source: { type: file, path: "${source}", format: jsonl }`,
      '    primaryKey: [id]',
      '    fields: { id: integer, v: integer }',
    ].join('\n'),
  };
  let lost: string;
  {
    await using node = await startNodeProcess(spec);
    await waitFor(async () => (await itemsOf(node))?.records === RECORDS, {
      timeoutMs: 30_000,
      what: 'the first generation to serve',
    });
    lost = (await itemsOf(node)).servingCache!;
    spec.port = node.port;
  }
  await damage(join(spec.dir, 'data', 'caches', lost));
  return { spec, lost, apiPort };
}

/** {@link buildThenDamage}, then the node and its api-server started again; dispose the result to stop both. */
async function restartAfter(root: string, damage: (generationDir: string) => Promise<void>) {
  const { spec, lost, apiPort } = await buildThenDamage(root, damage);
  const node = await startNodeProcess(spec);
  const api = await startHostApiServer(node).catch(async (err) => {
    await node[Symbol.asyncDispose]();
    throw err;
  });
  return {
    node,
    api,
    lost,
    apiUrl: `http://127.0.0.1:${apiPort}`,
    async [Symbol.asyncDispose]() {
      await api[Symbol.asyncDispose]();
      await node[Symbol.asyncDispose]();
    },
  };
}

/** The endpoint rebuilt into a new generation that serves every record, as the control API and api-server say. */
async function expectRebuilt(host: Awaited<ReturnType<typeof restartAfter>>, why: string): Promise<void> {
  const { node, lost, apiUrl } = host;
  const rebuilt = await waitFor(
    async () => {
      const items = await itemsOf(node);
      if (items?.phase === 'failed') return items; // stuck: fail below with what it said
      return items?.servingCache !== lost && items?.records === RECORDS ? items : null;
    },
    { timeoutMs: 30_000, what: 'the endpoint to be rebuilt into a new generation' },
  );
  expect({ phase: rebuilt.phase, error: rebuilt.error }).toEqual({ phase: 'completed', error: null });
  expect(rebuilt.servingCache).not.toBe(lost);
  expect(rebuilt.decision).toMatchObject({ decision: 'from-scratch' });
  expect(rebuilt.decision!.reason).toContain(`files of ${lost} ${why}`);

  const { generations, history } = (await call(`${node.url}/v1/endpoints/items/generations`)).body;
  expect(
    generations
      .map((g: { name: string; state: string }) => [g.name === lost ? 'lost' : 'new', g.state])
      .sort(),
  ).toEqual([
    ['lost', 'retired'],
    ['new', 'serving'],
  ]);
  expect(history).toContainEqual(
    expect.objectContaining({ from: lost, to: rebuilt.servingCache, cause: 'restart' }),
  );

  const record = await waitFor(
    async () => {
      const reply = await call(`${apiUrl}/v1/endpoints/items/records/42`);
      return reply.status === 200 ? reply.body : null;
    },
    { timeoutMs: 20_000, what: 'the api-server to serve the rebuilt generation' },
  );
  expect(record).toEqual({ id: 42, v: 82 });
  expect((await call(`${apiUrl}/v1/endpoints/items/count`, { json: {} })).body).toEqual({ count: RECORDS });
  expect(node.child.child.exitCode).toBeNull();
  expect(host.api.child.exitCode).toBeNull();
}

describe('the serving generation’s files lost while the host was down', { timeout: 90_000 }, () => {
  it('defect: an alias target whose files were removed failed the endpoint for good (CACHE_NOT_FOUND) instead of rebuilding it', async () => {
    await using dir = await tempDir('sluice-generation-removed-');
    await using host = await restartAfter(dir.path, (generation) => rm(generation, { recursive: true }));
    await expectRebuilt(host, 'are gone');
  });

  it('defect: an alias target whose data.mdb was overwritten with other bytes crashed the app-server (SIGSEGV in LMDB) on every start', async () => {
    await using dir = await tempDir('sluice-generation-damaged-');
    await using host = await restartAfter(dir.path, overwrite);
    await expectRebuilt(host, 'are damaged');
  });

  it('defect: an alias target whose data.mdb was cut short (its last page missing) was continued in place, a SIGBUS waiting for the first read of that page', async () => {
    await using dir = await tempDir('sluice-generation-truncated-');
    await using host = await restartAfter(dir.path, async (generation) => {
      const file = join(generation, 'data.mdb');
      await truncate(file, (await stat(file)).size - 4096);
    });
    await expectRebuilt(host, 'are damaged');
  });

  it('defect: an api-server started over a generation whose data.mdb was overwritten crashed (SIGSEGV) instead of answering 503', async () => {
    await using dir = await tempDir('sluice-generation-damaged-api-');
    const { spec, apiPort } = await buildThenDamage(dir.path, overwrite);
    // The app-server is down: nothing rebuilds, the api-server alone meets the damaged file.
    await using api = await startHostApiServer({ spec });
    const reply = await call(`http://127.0.0.1:${apiPort}/v1/endpoints/items/records/42`);
    expect({ status: reply.status, code: reply.body.code }).toEqual({
      status: 503,
      code: 'ENDPOINT_NOT_READY',
    });
    expect(reply.body.detail).toContain('is not an LMDB file');
    expect(api.child.exitCode).toBeNull();
  });

  it('defect: an overwritten alias table (dataDir/aliases/data.mdb) crashed the app-server (SIGSEGV) instead of stopping with CACHE_DAMAGED naming the file', async () => {
    await using dir = await tempDir('sluice-alias-table-damaged-');
    const spec: NodeSpec = { ...localNode('h1', dir.path), extraYaml: 'endpoints: []' };
    {
      await using _node = await startNodeProcess(spec);
    }
    const table = join(spec.dir, 'data', 'aliases', 'data.mdb');
    await overwrite(join(spec.dir, 'data', 'aliases'));
    await using child = spawnTs(BIN, ['--config', join(spec.dir, 'sluice.yaml')], { cwd: spec.dir });
    expect(await child.exited).toEqual({ code: 1, signal: null });
    expect(child.output()).toContain(`CACHE_DAMAGED: ${table} is not an LMDB file`);
  });
});
