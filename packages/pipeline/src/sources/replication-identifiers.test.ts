/**
 * A real application's tables, mirrored by logical replication: identifiers PostgreSQL allows (a schema, mixed case,
 * spaces, unicode, dots, reserved words, `__proto__`) and values of many types, each read by the snapshot and by the
 * stream and compared with `SELECT` of the table after every step.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { type EndpointConfig, parseQuery } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { aliasRecords } from '../../test/helpers.js';
import { replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

/** A record as JSON text with its fields sorted: the table's `row_to_json` and the cache's record compare equal. */
const canonical = (record: Record<string, unknown>): string =>
  JSON.stringify(Object.fromEntries(Object.entries(record).sort(([a], [b]) => (a < b ? -1 : 1))));

/** Every row of `table` (a quoted, qualified name) in `order`, canonical. */
async function tableRows(url: string, table: string, order: string): Promise<string[]> {
  const rows = await sql<{ r: Record<string, unknown> }>(
    url,
    `SELECT row_to_json(sluice_row) AS r FROM ${table} sluice_row ORDER BY ${order}`,
  );
  return rows.map((row) => canonical(row.r));
}

describe('replication: identifiers and values of a real application', () => {
  it('defect: a table keyed on a column whose name holds a dot (in a mixed-case schema, beside unicode, reserved and `__proto__` columns) was never served: its snapshot split the key column at the dot', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('idents');
    const table = '"AppData"."LineItems"';
    await sql(url, 'CREATE SCHEMA "AppData"');
    await sql(
      url,
      `CREATE TABLE ${table} ("order.id" text, "Line" int8, "__proto__" text, "select" text, "Ünïcödé 😀" text,
        PRIMARY KEY ("order.id", "Line"))`,
    );
    await sql(
      url,
      `INSERT INTO ${table} VALUES ('o-1', 1, 'p1', 's1', 'u1'), ('o-1', 2, 'p2', 's2', 'u2'), ('o-2', 1, 'p3', 's3', 'u3')`,
    );
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const endpoint = {
      name: 'lines',
      source: { type: 'postgres', connection: 'db', table: 'AppData.LineItems' },
      primaryKey: ['order.id', 'Line'],
      indexes: [],
    } as EndpointConfig;
    const pipeline = await startEndpointPipeline(
      endpoint,
      replicationContext(caches, url, { nodeId: 'idents' }),
    );
    const order = '"order.id", "Line"';
    /** Waits until the served records equal the table's rows, then returns them. */
    const converged = async (what: string) => {
      const want = await tableRows(url, table, order);
      let got: string[] = [];
      try {
        await waitFor(
          async () => {
            got = (await aliasRecords(caches, 'lines')).map(canonical);
            return JSON.stringify(got) === JSON.stringify(want);
          },
          { timeoutMs: 20_000, what },
        );
      } catch {
        // Show what differs (and why, from the endpoint's status) rather than only that it timed out.
        expect({ got, error: pipeline.status().error }).toEqual({ got: want, error: null });
      }
      return got;
    };
    try {
      // Before: never served — `SOURCE_FAILED` "Snapshot: missing FROM-clause entry for table "order"", retried
      // forever: the key column was quoted as `"order"."id"`.
      await pipeline.whenServing({ timeoutMs: 30_000 }).catch((err: unknown) => {
        expect(pipeline.status().error).toBeNull();
        throw err;
      });
      expect(await converged('the snapshot')).toHaveLength(3);
      const first = pipeline.status().servingCache;

      await sql(url, `INSERT INTO ${table} VALUES ('o-3', 9007199254740991, 'p4', 's4', 'u4')`);
      await converged('an insert');
      await sql(
        url,
        `UPDATE ${table} SET "select" = 'changed', "__proto__" = 'proto' WHERE "order.id" = 'o-1'`,
      );
      await converged('an update');
      // A key change: the old key must disappear.
      await sql(url, `UPDATE ${table} SET "order.id" = 'o-9', "Line" = 7 WHERE "order.id" = 'o-2'`);
      const rows = await converged('a key change');
      expect(rows.some((r) => r.includes('"o-2"'))).toBe(false);
      await sql(url, `DELETE FROM ${table} WHERE "order.id" = 'o-1' AND "Line" = 2`);
      expect(await converged('a delete')).toHaveLength(3);
      // All of it streamed into the generation the snapshot built.
      expect(pipeline.status().servingCache).toBe(first);
      expect(pipeline.status().badRecords.count).toBe(0);
    } finally {
      await pipeline.stop();
    }
  });

  it('defect: a table with a column named `constructor` or `$x` was never mirrored: its inferred cache schema was refused at start (`Invalid cache schema: fields.constructor: invalid key`)', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('odd_columns');
    // Names JavaScript or JSON treat specially, or the query language cannot address (`$x` reads as an operator).
    await sql(
      url,
      `CREATE TABLE odd ("toString" text PRIMARY KEY, "constructor" int, "__proto__" text, "hasOwnProperty" text,
        "$x" text, "a.b" text, "with space" text, """quoted""" text, "CamelCase" text, "naïve" text)`,
    );
    const row = (n: number) =>
      `('t${n}', ${n}, 'p${n}', 'h${n}', 'x${n}', 'ab${n}', 'ws${n}', 'q${n}', 'c${n}', 'n${n}')`;
    await sql(url, `INSERT INTO odd VALUES ${row(1)}, ${row(2)}`);
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const indexed = ['hasOwnProperty', 'a.b', 'with space', '"quoted"', 'CamelCase', 'naïve'];
    const endpoint = {
      name: 'odd',
      source: { type: 'postgres', connection: 'db', table: 'odd' },
      primaryKey: ['toString'],
      indexes: indexed.map((field) => [field]),
    } as EndpointConfig;
    // Before: rejected here — ValidationError "Invalid cache schema: fields.constructor: invalid key: not a valid
    // field name (and 1 more)": the columns' names went into the cache schema as queryable fields.
    const pipeline = await startEndpointPipeline(
      endpoint,
      replicationContext(caches, url, { nodeId: 'odd' }),
    );
    const converged = async (what: string) => {
      const want = await tableRows(url, 'odd', '"toString"');
      let got: string[] = [];
      await waitFor(
        async () => {
          got = (await aliasRecords(caches, 'odd')).map(canonical);
          return JSON.stringify(got) === JSON.stringify(want);
        },
        { timeoutMs: 20_000, what },
      ).catch(() => expect(got).toEqual(want));
      return got;
    };
    try {
      await pipeline.whenServing({ timeoutMs: 30_000 });
      expect(await converged('the snapshot')).toHaveLength(2);
      await sql(url, `INSERT INTO odd VALUES ${row(3)}`);
      await sql(
        url,
        `UPDATE odd SET "__proto__" = 'pp', "$x" = 'xx', "constructor" = 10 WHERE "toString" = 't1'`,
      );
      await sql(url, `DELETE FROM odd WHERE "toString" = 't2'`);
      const rows = await converged('an insert, an update and a delete');
      expect(rows).toHaveLength(2);
      // `__proto__` is an own field of the served record, not its prototype.
      const served = await aliasRecords(caches, 'odd');
      expect(Object.hasOwn(served[0]!, '__proto__')).toBe(true);
      expect(Object.getPrototypeOf(served[0])).toBe(Object.prototype);

      const cache = await caches.openRo('odd');
      try {
        // Every index answers a filter and an order by its own field.
        for (const field of indexed) {
          const value = JSON.parse(rows[1]!)[field];
          const found = cache.query(parseQuery({ $filter: { [field]: value } })).records;
          expect(
            found.map((r) => r.toString),
            field,
          ).toEqual(['t3']);
          const ordered = cache.query(parseQuery({ $order_by: { [field]: 'desc' } })).records;
          expect(
            ordered.map((r) => r.toString),
            field,
          ).toEqual(['t3', 't1']);
        }
        // The names the query language cannot address are carried in the records, and refused by name in a query.
        expect(() => parseQuery(JSON.parse('{"$filter":{"$x":"xx"}}'))).toThrow(
          /\$filter\.\$x: unknown operator/,
        );
        expect(() => parseQuery({ $filter: { constructor: 10 } })).toThrow(
          /constructor: reserved field name/,
        );
        expect(Object.keys(cache.schema.fields).sort()).toEqual(
          ['toString', 'hasOwnProperty', 'a.b', 'with space', '"quoted"', 'CamelCase', 'naïve'].sort(),
        );
      } finally {
        await cache.close();
      }
      expect(pipeline.status().badRecords.count).toBe(0);
    } finally {
      await pipeline.stop();
    }
  });
});
