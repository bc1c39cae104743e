/**
 * Primary keys moved inside one source transaction. With a `DEFERRABLE` key (checked at the end of the statement, or
 * at commit) a row may be moved onto a key another row still holds: `UPDATE t SET id = id + 1` moves row 1 onto 2
 * before row 2 moves on to 3. The changes stream row by row, so the removal of old key 2 (row 2's move) arrives
 * after row 1 was placed there — the mirror must apply the transaction's net effect per key, not each change as a
 * blind write by key. Such a key is no replica identity (PostgreSQL never takes a deferrable index), so the table
 * has `REPLICA IDENTITY FULL`: every removal carries the whole old row.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { EndpointConfig } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../../test/helpers.js';
import {
  cacheRows,
  committedLsn,
  replicationContext,
  tableRows,
  useLogicalPostgres,
} from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';
import { compareLsn } from './replication/lsn.js';

const server = useLogicalPostgres();

const MOVES = {
  name: 'moves',
  source: { type: 'postgres', connection: 'db', table: 'moves' },
  primaryKey: ['id'],
  fields: { id: 'integer', v: 'string' },
  indexes: [['v']],
} as EndpointConfig;

const ROWS = 200;

describe('replication: keys moved inside one transaction', () => {
  it('defect: shifting, swapping or permuting a DEFERRABLE key in one statement lost rows in the mirror', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('moves');
    await sql(url, 'CREATE TABLE moves (id int PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE, v text NOT NULL)');
    await sql(url, 'ALTER TABLE moves REPLICA IDENTITY FULL');
    await sql(url, `INSERT INTO moves SELECT i, 'row ' || i FROM generate_series(1, ${ROWS}) i`);
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(MOVES, replicationContext(caches, url, { nodeId: 'mv' }));
    try {
      await pipeline.whenServing({ timeoutMs: 30_000 });
      const cache = await caches.openRo('moves');
      try {
        /** Runs `statements` (one transaction), waits until the cache committed past it, compares every row. */
        const mirrored = async (what: string, statements: string) => {
          await sql(url, statements);
          const [{ lsn }] = (await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn')) as [
            { lsn: string },
          ];
          await waitFor(
            () => {
              const at = committedLsn(cache.commitState().checkpoint, 'moves.source');
              return at !== null && compareLsn(at, lsn) >= 0;
            },
            { timeoutMs: 30_000, what: `${what} committed at ${lsn}` },
          );
          const table = await tableRows(url, 'moves');
          expect(table.size, what).toBe(ROWS);
          const records = allRecords(cache);
          expect(records.length, `${what}: records in the mirror`).toBe(ROWS);
          expect(cacheRows(records), what).toEqual(table);
          // The index agrees with the records (a record lost from the data but not the index would show here).
          const values = [...table.values()].map((row) => (JSON.parse(row) as { v: string }).v);
          expect(cache.count({ v: { $in: values } }), `${what}: records found through the index on v`).toBe(
            ROWS,
          );
        };
        await mirrored('shift up', 'UPDATE moves SET id = id + 1');
        await mirrored(
          'swap',
          'UPDATE moves SET id = CASE id WHEN 2 THEN 3 WHEN 3 THEN 2 END WHERE id IN (2, 3)',
        );
        await mirrored('shift down', 'UPDATE moves SET id = id - 1');
        await mirrored(
          'random permutation',
          `UPDATE moves SET id = p.to_id FROM (
             SELECT id AS from_id, row_number() OVER (ORDER BY random())::int AS to_id FROM moves) p
           WHERE moves.id = p.from_id`,
        );
        // Across statements: a row moved onto a key another row holds (deferred to commit), then moved back.
        await mirrored(
          'moved onto a held key and back',
          `BEGIN; SET CONSTRAINTS ALL DEFERRED;
           CREATE TEMP TABLE mover ON COMMIT DROP AS SELECT v FROM moves WHERE id = 4;
           UPDATE moves SET id = 5 WHERE id = 4;
           UPDATE moves SET id = 4 WHERE id = 5 AND v = (SELECT v FROM mover);
           COMMIT`,
        );
        await mirrored(
          'moved onto a held key, the holder moved away',
          `BEGIN; SET CONSTRAINTS ALL DEFERRED;
           UPDATE moves SET id = ${ROWS + 1} WHERE id = 7;
           UPDATE moves SET id = 7 WHERE id = 8;
           UPDATE moves SET id = 8 WHERE id = ${ROWS + 1};
           COMMIT`,
        );
        expect(pipeline.status().badRecords.count).toBe(0);
      } finally {
        await cache.close();
      }
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});
