/**
 * An endpoint over a polled PostgreSQL table, with no `fields` configured: typed by its columns, so a numeric
 * column that held only whole values still takes fractional updates; and what a schema does refuse while streaming
 * shows in `GET /v1/endpoints` (`badRecords`), not only in the log.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { createTestDatabase, tempDir, waitFor } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { call, localNode, startNodeProcess } from './helpers.js';

describe('endpoints over a polled PostgreSQL table', () => {
  it('defect: a numeric column inferred as integer from whole values dropped every fractional update, with nothing in the endpoint status', async () => {
    await using db = await createTestDatabase('sluice_app_numeric');
    await using dir = await tempDir('sluice-app-numeric-');
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query(
        'CREATE TABLE products (id int PRIMARY KEY, name text, price numeric, cat text, updated_at timestamptz)',
      );
      await client.query(
        `INSERT INTO products SELECT g, 'p' || g, g * 10, 'a', now() - interval '1 hour' FROM generate_series(1, 100) g`,
      );
      const source = '{ type: postgres, connection: db, table: products, cursor: updated_at }';
      await using node = await startNodeProcess({
        ...localNode('h1', dir.path),
        extraYaml: [
          'connections:',
          `  db: { type: postgres, url: "${db.url}" }`,
          'endpoints:',
          `  - { name: products, source: ${source}, primaryKey: [id] }`,
          // The same table with a type the operator chose: fractional prices are refused.
          `  - { name: whole, source: ${source}, primaryKey: [id], fields: { id: integer, price: integer } }`,
        ].join('\n'),
      });
      const endpoints = async () =>
        Object.fromEntries(
          (await call(`${node.url}/v1/endpoints`)).body.endpoints.map((e: { name: string }) => [e.name, e]),
        );
      await waitFor(
        async () => {
          const all = await endpoints();
          return all.products?.records === 100 && all.whole?.records === 100;
        },
        { timeoutMs: 30_000, what: 'both endpoints to serve their snapshot' },
      );
      await client.query(`UPDATE products SET price = 10.5, name = 'frac', updated_at = now() WHERE id = 42`);
      await client.query(`INSERT INTO products VALUES (999999, 'fracnew', 2.25, 'a', now())`);
      const after = await waitFor(
        async () => {
          const all = await endpoints();
          // `whole` refuses both: the new row is not added, and row 42's refused update is its current state, so
          // the value it replaced is not served any more (99 records).
          return all.products.records === 101 && all.whole.badRecords.count >= 2 && all.whole.records === 99
            ? all
            : null;
        },
        { timeoutMs: 30_000, what: 'the fractional changes: served by one endpoint, refused by the other' },
      );
      expect(after.products).toMatchObject({
        phase: 'streaming',
        error: null,
        badRecords: { count: 0, last: null },
      });
      expect(after.whole).toMatchObject({
        phase: 'streaming',
        records: 99,
        badRecords: {
          last: {
            source: 'whole.source',
            reason: expect.stringMatching(/^field "price": expected an integer, got number (10\.5|2\.25)$/),
            at: expect.any(String),
          },
        },
      });
      const reader = await openCacheManager(join(dir.path, 'node', 'data'), { readOnly: true });
      try {
        const info = await reader.info(reader.resolveAlias('products')!.cache);
        expect(info?.schema.fields).toEqual({
          id: 'integer',
          name: 'string',
          price: 'number',
          cat: 'string',
          updated_at: 'timestamp',
        });
        const cache = await reader.openRo('products');
        expect(cache.get([42])).toMatchObject({ name: 'frac', price: 10.5 });
        expect(cache.get([999999])).toMatchObject({ name: 'fracnew', price: 2.25 });
        await cache.close();
        const whole = await reader.openRo('whole');
        expect(whole.get([42])).toBeUndefined();
        expect(whole.get([41])).toMatchObject({ id: 41, price: 410 });
        await whole.close();
      } finally {
        await reader.close();
      }
    } finally {
      await client.end();
    }
  });
});
