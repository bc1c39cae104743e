/**
 * An alias switch made while the app-server could not reach NATS, and the app-server stopped before it could again:
 * its `AliasRedirected` was kept in the backplane's memory only (the outbox), so it went with the process. An
 * api-server of the host that stayed connected to NATS all along hears no event and, its backplane never having
 * dropped, neither polls the alias table nor reconciles on a reconnect: it went on serving the old generation until
 * its periodic reconcile (`api.reconcileMs`, long here so that it cannot mask the loss).
 *
 * Real processes: a nats-server, the app-server reaching it through a TCP proxy the test cuts (its NATS outage),
 * and the host's api-server on NATS directly, reading the same LMDB files.
 */
import { join } from 'node:path';
import { freePort, startNatsServer, startTcpProxy, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  localNode,
  rebuildWithoutBackplane,
  servingItems,
  startHostApiServer,
  startNodeProcess,
  writeRecords,
} from './helpers.js';

/** The generation that answers a read of `items` on the api-server (its `sluice-cache` header). */
async function answeringGeneration(apiUrl: string): Promise<string | null> {
  const reply = await call(`${apiUrl}/v1/endpoints/items/records/1`);
  return reply.status === 200 ? reply.headers.get('sluice-cache') : null;
}

describe('an alias switch made during the app-server’s NATS outage, the app-server restarted since', () => {
  it('defect: the host’s api-server kept serving the old generation after the app-server restarted with NATS back', {
    timeout: 120_000,
  }, async () => {
    await using nats = await startNatsServer();
    await using proxy = await startTcpProxy(nats.port);
    await using dir = await tempDir('sluice-app-alias-restart-');
    const source = await writeRecords(join(dir.path, 'items.jsonl'), 200);
    const apiPort = await freePort();
    const spec = {
      ...localNode('h1', dir.path),
      nats: proxy.url,
      extraYaml: [
        // A periodic reconcile far beyond the test: only an event can move the api-server.
        `api: { port: ${apiPort}, reconcileMs: 600000 }`,
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${source}", format: jsonl }`,
        '    primaryKey: [id]',
      ].join('\n'),
    };
    const node = await startNodeProcess(spec);
    let restarted: Awaited<ReturnType<typeof startNodeProcess>> | null = null;
    try {
      const first = await waitFor(() => servingItems(node.url), {
        timeoutMs: 30_000,
        what: 'the first generation to serve',
      });
      // The api-server goes to NATS directly: the app-server's outage is not its own.
      await using _api = await startHostApiServer(node, { SLUICE_NATS_URL: nats.url });
      const apiUrl = `http://127.0.0.1:${apiPort}`;
      await waitFor(async () => (await answeringGeneration(apiUrl)) === first, {
        timeoutMs: 30_000,
        what: 'the api-server to serve the first generation',
      });

      await proxy.cut();
      const second = await rebuildWithoutBackplane(node.url, first);
      // Stopped (gracefully) while NATS is still out of its reach: its kept redirect cannot be published.
      expect(await node.child.stop('SIGTERM')).toMatchObject({ code: 0 });
      expect(node.child.output()).toContain('closing with alias redirects never published to NATS');
      await proxy.restore();
      restarted = await startNodeProcess(node.spec);

      // Given its time; what it serves then is the assertion (its failure names the generation it still serves).
      await waitFor(async () => (await answeringGeneration(apiUrl)) === second, {
        timeoutMs: 30_000,
        what: 'the api-server to serve the generation the alias was switched to during the outage',
      }).catch(() => {});
      expect({ answering: await answeringGeneration(apiUrl) }).toEqual({ answering: second });
    } finally {
      await node[Symbol.asyncDispose]();
      await restarted?.[Symbol.asyncDispose]();
    }
  });
});
