/**
 * Table names a real database uses, mirrored by logical replication: names that need quoting (a schema, mixed case, a
 * reserved word, PostgreSQL's longest identifier).
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig, EndpointPipeline } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { aliasRecords } from '../../test/helpers.js';
import { replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

/** An endpoint of `table` (as configured), keyed by `id`. */
const endpointOf = (name: string, table: string): EndpointConfig =>
  ({
    name,
    source: { type: 'postgres', connection: 'db', table },
    primaryKey: ['id'],
    indexes: [],
  }) as EndpointConfig;

describe('replication: table names', () => {
  it('mirrors tables whose names need quoting: a schema, mixed case, a reserved word, 63 characters', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('names_tables');
    const long = `t${'x'.repeat(62)}`;
    // configured name → the table as SQL names it
    const tables: Array<[string, string]> = [
      ['sales.orders', 'sales.orders'],
      ['Orders', '"Orders"'],
      ['order', '"order"'],
      ['Sales.Order', '"Sales"."Order"'],
      [long, long],
    ];
    await sql(url, 'CREATE SCHEMA sales');
    await sql(url, 'CREATE SCHEMA "Sales"');
    for (const [, quoted] of tables) {
      await sql(url, `CREATE TABLE ${quoted} (id int PRIMARY KEY, v text)`);
      await sql(url, `INSERT INTO ${quoted} VALUES (1, 'a')`);
    }
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const pipelines: EndpointPipeline[] = [];
    try {
      for (const [i, [table]] of tables.entries())
        pipelines.push(
          await startEndpointPipeline(
            endpointOf(`e${i}`, table),
            replicationContext(caches, url, { nodeId: 'h1' }),
          ),
        );
      for (const pipeline of pipelines) await pipeline.whenServing({ timeoutMs: 30_000 });
      for (const [, quoted] of tables) await sql(url, `INSERT INTO ${quoted} VALUES (2, ${"'"}b${"'"})`);
      await waitFor(
        async () => {
          const served = await Promise.all(tables.map((_, i) => aliasRecords(caches, `e${i}`)));
          return served.every((records) => JSON.stringify(records) === '[{"id":1,"v":"a"},{"id":2,"v":"b"}]');
        },
        { timeoutMs: 30_000, what: 'every table snapshotted and streamed' },
      );
      expect(pipelines.map((p) => p.status().error)).toEqual(tables.map(() => null));
    } finally {
      for (const pipeline of pipelines) await pipeline.stop();
    }
  });
});
