/**
 * Endpoint pipelines start with the node: the alias is created on first start and reopened after a restart,
 * a forced rebuild moves it blue/green, and every move is published as `AliasRedirected` on NATS.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  localNode,
  type NodeProcess,
  observeEvents,
  startNodeProcess,
  writeRecords,
} from './helpers.js';

describe('endpoint pipelines of an app-server', () => {
  it('creates the alias on start, reopens it after a restart, rebuilds blue/green and publishes the moves', async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-app-endpoints-');
    const source = await writeRecords(join(dir.path, 'items.jsonl'), 500);
    await using observer = await observeEvents(nats.url);
    const events = observer.events;
    const spec = {
      ...localNode('h1', dir.path),
      nats: nats.url,
      extraYaml: [
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${source}", format: jsonl }`,
        '    primaryKey: [id]',
        '    fields: { id: integer, value: number, category: string }',
        '    indexes: [[category]]',
        '    filter: { category: { $ne: "c" } }',
      ].join('\n'),
    };
    let node: NodeProcess = await startNodeProcess(spec);
    try {
      const serving = await waitFor(
        async () => {
          const reply = await call(`${node.url}/v1/endpoints`);
          const items = reply.body.endpoints.find((e: { name: string }) => e.name === 'items');
          return items?.servingCache && items.records === 334 ? items : null;
        },
        { timeoutMs: 20_000, what: 'the items endpoint to serve its snapshot' },
      );
      expect(serving).toMatchObject({ alias: 'items', error: null });
      const first = serving.servingCache as string;
      await waitFor(() => events.some((e) => e.type === 'AliasRedirected' && e.to === first), {
        what: 'AliasRedirected for the first generation',
      });
      // What an api-server on this host sees: the alias and the records, read-only.
      const reader = await openCacheManager(join(spec.dir, 'data'), { readOnly: true });
      try {
        expect(reader.resolveAlias('items')?.cache).toBe(first);
        const cache = await reader.openRo('items');
        expect(cache.get([1])).toMatchObject({ id: 1, category: 'a' });
        expect(cache.get([3])).toBeUndefined();
        await cache.close();
      } finally {
        await reader.close();
      }

      const rebuild = await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' });
      expect(rebuild.status).toBe(202);
      const rebuilt = await waitFor(
        async () => {
          const items = (await call(`${node.url}/v1/endpoints`)).body.endpoints[0];
          return items.servingCache !== first && items.records === 334 ? items : null;
        },
        { timeoutMs: 20_000, what: 'the rebuilt generation to serve' },
      );
      await waitFor(
        () =>
          events.some(
            (e) => e.type === 'AliasRedirected' && e.from === first && e.to === rebuilt.servingCache,
          ),
        { what: 'AliasRedirected blue → green' },
      );
      // Every move names this host (the app-server's node.id): caches and alias versions are per host.
      const moves = events.filter((e) => e.type === 'AliasRedirected');
      expect(moves.length).toBeGreaterThanOrEqual(2);
      expect(new Set(moves.map((e) => e.host))).toEqual(new Set(['h1']));
      expect((await call(`${node.url}/v1/endpoints/nope/rebuild`, { method: 'POST' })).body.code).toBe(
        'UNKNOWN_ENDPOINT',
      );

      expect((await node.child.stop('SIGTERM')).code).toBe(0);
      node = await startNodeProcess(spec);
      const reopened = await waitFor(
        async () => {
          const items = (await call(`${node.url}/v1/endpoints`)).body.endpoints[0];
          return items.servingCache ? items : null;
        },
        { timeoutMs: 20_000, what: 'the endpoint after a restart' },
      );
      expect(reopened.servingCache).toBe(rebuilt.servingCache);
      expect(reopened.decision.decision).toBe('resume');
      const metrics = await call(`${node.url}/metrics`);
      expect(metrics.body).toMatch(/sluice_pipeline_records_read\{endpoint="items"\}/);
    } finally {
      await node.child.stop('SIGKILL');
    }
  }, 90_000);
});
