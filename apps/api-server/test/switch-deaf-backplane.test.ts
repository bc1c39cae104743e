/**
 * A switch whose event does not arrive while the NATS connection still looks up: the nats-server hangs (SIGSTOP —
 * as a partition that drops packets without resets does), so the api-server's connection stays `connected` and hears
 * nothing. The alias table on the host's own disk is the truth (DESIGN.md § Endpoints): the api-server must follow
 * the move it shows, and a `sluice-min-position` request for a position the new serving generation has committed
 * must be answered within `api.freshnessWaitMs` ("a switch in between is followed"), not refused with 503 until the
 * periodic reconcile — set far away here, so that only the table can explain the switch.
 *
 * This process writes the generations as the host's app-server would (`writer-host.ts`); the api-server is a real
 * `sluice-api-server` process on a private nats-server.
 */

import { createNatsBackplane } from '@sluice/backplane';
import { type CacheManager, openCacheManager } from '@sluice/cache';
import { aliasRedirected, type PipelineCheckpoint } from '@sluice/core';
import { startNatsServer, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { TEST_HOST } from './fixtures/data.js';
import { fetchJson, spawnApiServer, switchesOf, writeConfig } from './helpers.js';

/** A generation of `items` holding records 1..3, committed at replication position `lsn`. */
async function buildAt(manager: CacheManager, lsn: string, gen: number): Promise<string> {
  const cache = await manager.create({
    endpoint: 'items',
    schema: { fields: { id: 'integer', gen: 'integer' }, primaryKey: ['id'], indexes: [] },
  });
  cache.apply([1, 2, 3].map((id) => ({ op: 'upsert' as const, record: { id, gen } })));
  const checkpoint: PipelineCheckpoint = {
    dag: 'deaf-backplane',
    epoch: 1,
    positions: { 'items.source': { capture: 'replication', phase: 'stream', lsn } },
    at: new Date().toISOString(),
  };
  await cache.commit(checkpoint);
  await cache.markSnapshottingDone('items.source');
  const name = cache.name;
  await cache.close();
  return name;
}

describe('a switch while the backplane is connected but deaf', () => {
  it('defect: an api-server whose NATS connection hung kept serving the retired generation and refused sluice-min-position with 503 until its periodic reconcile', {
    timeout: 90_000,
  }, async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-deaf-backplane-');
    const manager = await openCacheManager(dir.path, { gcGraceMs: 3_600_000 });
    const publisher = await createNatsBackplane({ nats: nats.url, clusterName: 'sluice', nodeId: 'writer' });
    try {
      const blue = await buildAt(manager, '0/100', 1);
      await manager.redirect('items', blue);
      const config = await writeConfig(dir.path, {
        node: { id: TEST_HOST },
        dataDir: dir.path,
        nats: nats.url,
        // The periodic reconcile cannot explain a switch within this test.
        api: { reconcileMs: 600_000, freshnessWaitMs: 3_000 },
        logLevel: 'info',
      });
      await using api = await spawnApiServer(config);
      const first = await fetchJson(`${api.url}/v1/endpoints/items/records/1`);
      expect([first.status, first.headers.get('sluice-cache')]).toEqual([200, blue]);

      nats.pause();
      try {
        const green = await buildAt(manager, '0/200', 2);
        const { from, version } = await manager.redirect('items', green);
        // The host's app-server announces the move; the hung server never delivers it.
        void publisher
          .publish(
            aliasRedirected({
              host: TEST_HOST,
              alias: 'items',
              from,
              to: green,
              checkpoint: { dag: 'deaf-backplane', epoch: 1, positions: {}, at: new Date().toISOString() },
              version,
            }),
          )
          .catch(() => undefined);

        // Read-your-writes for a position only the new serving generation has committed.
        const fresh = await fetchJson(`${api.url}/v1/endpoints/items/records/1`, {
          headers: { 'sluice-min-position': '0/200' },
        });
        expect({
          status: fresh.status,
          code: fresh.body?.code,
          cache: fresh.headers.get('sluice-cache'),
          position: fresh.headers.get('sluice-position'),
          gen: fresh.body?.gen,
        }).toEqual({ status: 200, code: undefined, cache: green, position: 'items.source="0/200"', gen: 2 });
        // Meanwhile the connection still counted as up: the move was followed from the alias table.
        const ready = await fetchJson(`${api.url}/readyz`);
        expect(ready.body.backplane).toBe('connected');
        const plain = await fetchJson(`${api.url}/v1/endpoints/items/records/2`);
        expect([plain.status, plain.headers.get('sluice-cache'), plain.body.gen]).toEqual([200, green, 2]);
        expect(switchesOf(await (await fetch(`${api.url}/metrics`)).text(), 'items')).toBe(1);
      } finally {
        nats.resume();
      }
    } finally {
      await publisher.close();
      await manager.close();
    }
  });
});
