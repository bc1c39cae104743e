/**
 * One URL per record: a numeric key in a lookup URL is accepted only in its canonical spelling (what
 * `String(value)` writes, and what `@sluice/client`'s `keySegment` sends), so a cache in front of the api-server
 * never holds one record under several URLs. The fast route (below fastify) and the fastify route agree: the fast
 * one leaves such a request alone and fastify refuses it.
 */
import { openCacheManager } from '@sluice/cache';
import { DEFAULT_QUERY_LIMITS } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { checkpointStamps } from '../src/checkpoint-headers.js';
import { endpointAccess } from '../src/endpoint-access.js';
import { fastLookupRoute } from '../src/fast-lookup.js';
import { recordReader } from '../src/record-read.js';
import { EndpointRegistry } from '../src/registry.js';
import { LEFT_TO_FASTIFY, listen, standInServer, writeItemsAndOrders } from './fast-routes.js';
import { startQuietApiServer } from './helpers.js';

/** Non-canonical spellings of integer keys, the path the refusal names and the spelling it points to. */
const NON_CANONICAL = [
  ['items/records/01', 'key', '1'],
  ['items/records/007', 'key', '7'],
  ['items/records/-0', 'key', '0'],
  ['items/records/%2B1', 'key', '1'],
  ['items/records?key=01', 'key', '1'],
  ['orders/records/eu,01', 'key.id', '1'],
] as const;

describe('key spellings in lookup URLs', () => {
  it('defect: /records/01 answered record 1 and /records/-0 was looked up as key -0 — now 400 VALIDATION_FAILED naming the canonical spelling, on both routes', async () => {
    await using dir = await tempDir('sluice-key-spellings-');
    await writeItemsAndOrders(dir.path);

    // The fastify route: refused with the path and the spelling to use.
    const server = await startQuietApiServer(dir.path);
    try {
      for (const [path, at, canonical] of NON_CANONICAL) {
        const response = await fetch(`${server.url}/v1/endpoints/${path}`);
        const body = (await response.json()) as {
          code: string;
          errors: Array<{ path: string; message: string }>;
        };
        expect(response.status, path).toBe(400);
        expect(body.code).toBe('VALIDATION_FAILED');
        expect(body.errors).toHaveLength(1);
        expect(body.errors[0]!.path).toBe(at);
        expect(body.errors[0]!.message).toContain(`write it as "${canonical}"`);
      }
      // The canonical spellings are answered.
      for (const path of [
        'items/records/1',
        'items/records/7',
        'items/records?key=1',
        'orders/records/eu,1',
      ]) {
        const response = await fetch(`${server.url}/v1/endpoints/${path}`);
        expect(response.status, path).toBe(200);
      }
      expect((await fetch(`${server.url}/v1/endpoints/items/records/0`)).status).toBe(404);
    } finally {
      await server.close();
    }

    // The fast route: leaves them to fastify (which refuses them, above) instead of answering a record.
    await using manager = await openCacheManager(dir.path, { readOnly: true });
    await using registry = await EndpointRegistry.start({
      caches: manager,
      host: 'local',
      reconcileMs: 600_000,
    });
    const fast = standInServer(
      fastLookupRoute({
        registry,
        access: endpointAccess({
          registry,
          authenticator: null,
          freshnessWaitMs: 100,
          limits: DEFAULT_QUERY_LIMITS,
        }),
        readRecord: recordReader(DEFAULT_QUERY_LIMITS),
        headersOf: checkpointStamps().headersOf,
        record: () => {},
        cors: false,
        isStopping: () => false,
      }),
    );
    try {
      const base = await listen(fast);
      for (const path of [
        'items/records/01',
        'items/records/-0',
        'items/records/%2B1',
        'orders/records/eu,01',
      ])
        expect((await fetch(`${base}/v1/endpoints/${path}`)).status, path).toBe(LEFT_TO_FASTIFY);
      expect((await fetch(`${base}/v1/endpoints/items/records/1`)).status).toBe(200);
    } finally {
      await new Promise<void>((resolve) => fast.close(() => resolve()));
    }
  });
});
