/**
 * A nats-server restarted with its JetStream state lost (SIGKILL, its store directory wiped — a new volume, a
 * replaced pod): Sluice's only JetStream state is the KV bucket holding the latest `AliasRedirected` per host and
 * alias. Once NATS is back the app-server announces its alias table again, so a process that connects late reads the
 * host's current generation, and the host's api-server, reconnected, follows the next switch by its event.
 *
 * Real processes: an app-server (SQLite store) and the host's api-server on a private nats-server.
 */
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createNatsBackplane } from '@sluice/backplane';
import { freePort, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  localNode,
  servingItems,
  startHostApiServer,
  startNodeProcess,
  writeRecords,
} from './helpers.js';

describe('NATS restarted without its JetStream state', () => {
  it('the alias state is announced again and the api-server follows the next switch by its event', {
    timeout: 120_000,
  }, async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-nats-wiped-');
    const source = await writeRecords(join(dir.path, 'items.jsonl'), 200);
    const apiPort = await freePort();
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      nats: nats.url,
      extraYaml: [
        // A periodic reconcile far beyond the test: only the event can explain the api-server's switch.
        `api: { port: ${apiPort}, reconcileMs: 600000 }`,
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${source}", format: jsonl }`,
        '    primaryKey: [id]',
      ].join('\n'),
    });
    const first = await waitFor(() => servingItems(node.url), {
      timeoutMs: 30_000,
      what: 'the first generation',
    });
    await using _api = await startHostApiServer(node);
    const api = `http://127.0.0.1:${apiPort}`;

    await nats.kill();
    for (const entry of await readdir(nats.storeDir))
      await rm(join(nats.storeDir, entry), { recursive: true });
    await nats.start();
    await waitFor(
      async () =>
        (await call(`${api}/readyz`)).body?.backplane === 'connected' &&
        (await call(`${node.url}/readyz`)).body?.backplane === 'up',
      { timeoutMs: 30_000, what: 'the app-server and the api-server to reconnect' },
    );
    await using late = await createNatsBackplane({ nats: nats.url, clusterName: 'sluice', nodeId: 'late' });
    const latest = async () =>
      (await late.latestAliasEvents()).map((e) =>
        e.type === 'AliasRedirected' ? [e.host, e.alias, e.to] : e.type,
      );
    await waitFor(async () => (await latest()).length > 0, {
      timeoutMs: 20_000,
      what: 'the alias state in the recreated bucket',
    });
    expect(await latest()).toEqual([['h1', 'items', first]]);

    expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const second = await waitFor(
      async () => {
        const serving = await servingItems(node.url);
        return serving !== null && serving !== first ? serving : null;
      },
      { timeoutMs: 30_000, what: 'the rebuilt generation' },
    );
    await waitFor(
      async () => (await call(`${api}/v1/endpoints/items/records/1`)).headers.get('sluice-cache') === second,
      {
        timeoutMs: 20_000,
        what: 'the api-server to serve the rebuilt generation',
      },
    );
    const metrics = await (await fetch(`${api}/metrics`)).text();
    expect(metrics.split('\n').filter((line) => line.startsWith('sluice_api_switches_total'))).toEqual([
      'sluice_api_switches_total{endpoint="items",reason="event"} 1',
    ]);
    expect(await latest()).toEqual([['h1', 'items', second]]);
  });
});
