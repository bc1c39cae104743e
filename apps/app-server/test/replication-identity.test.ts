/**
 * What an app-server decides about a replicated table that cannot be mirrored as configured, against a real
 * PostgreSQL with `wal_level=logical` and real app-server processes: an endpoint keyed on columns the table's replica
 * identity does not cover is refused with `REPLICA_IDENTITY_MISSING` (never served diverging), and a source table
 * dropped and recreated is rebuilt from the new table — while running, and after a restart — never served (or
 * resumed in place) from the dropped one.
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { parseQuery } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, type NodeProcess, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { databaseWith, endpointOf, replicatedEndpointsYaml } from './replication-node.js';

const postgres = logicalPostgresPerFile();

/** What the endpoint serves: its alias's records, read as an api-server reads them (the node's data directory). */
async function records(node: NodeProcess, name: string): Promise<Array<Record<string, unknown>>> {
  const reader = await openCacheManager(join(node.spec.dir, 'data'), { readOnly: true });
  try {
    if (reader.resolveAlias(name) === null) return [];
    const cache = await reader.openRo(name);
    try {
      return cache.query(parseQuery({ $limit: 100 })).records as Array<Record<string, unknown>>;
    } finally {
      await cache.close();
    }
  } finally {
    await reader.close();
  }
}

describe('replicated tables an endpoint cannot follow as it is', () => {
  it('defect: an endpoint keyed outside the replica identity is refused; a recreated table is rebuilt', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-identity-');
    const url = await databaseWith(
      postgres(),
      'identity',
      'CREATE TABLE byname (id int PRIMARY KEY, v text UNIQUE NOT NULL, n int)',
      "INSERT INTO byname VALUES (1, 'one', 1), (2, 'two', 2), (3, 'three', 3)",
    );
    const createFullid = async (rows: string) => {
      await sql(url, 'CREATE TABLE fullid (a int NOT NULL, b text)');
      await sql(url, 'ALTER TABLE fullid REPLICA IDENTITY FULL');
      await sql(url, `INSERT INTO fullid VALUES ${rows}`);
    };
    await createFullid("(1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')");
    const spec = {
      ...localNode('h7', dir.path),
      extraYaml: replicatedEndpointsYaml(url, [
        { name: 'byname', primaryKey: 'v', fields: null },
        { name: 'fullid', sourceKey: '[a]', primaryKey: 'a', fields: null },
      ]),
    };
    const keysOf = async (node: NodeProcess) =>
      (await records(node, 'fullid')).map((r) => r.a as number).sort((x, y) => x - y);
    {
      await using node = await startNodeProcess(spec);
      await waitFor(async () => JSON.stringify(await keysOf(node)) === '[1,2,3,4]', {
        timeoutMs: 60_000,
        what: 'fullid to serve its rows',
      });
      // Refused up front: not streaming, not serving a diverging cache.
      const byname = await endpointOf(node, 'byname');
      expect(byname.phase).toBe('failed');
      expect(byname.servingCache).toBeNull();
      expect(byname.error?.code).toBe('REPLICA_IDENTITY_MISSING');
      expect(byname.error?.message).toContain('REPLICA IDENTITY FULL');

      // Replaced while streaming: the endpoint rebuilds from the new table.
      await sql(url, 'DROP TABLE fullid');
      await createFullid("(100, 'new'), (101, 'new2')");
      await waitFor(async () => JSON.stringify(await keysOf(node)) === '[100,101]', {
        timeoutMs: 60_000,
        what: `fullid to serve the recreated table (${JSON.stringify(await endpointOf(node, 'fullid'))})`,
      });
      expect(await node.child.stop('SIGTERM', 20_000)).toMatchObject({ code: 0 });
    }

    // Replaced while the app-server is down: the restart rebuilds rather than resuming in place.
    await sql(url, 'DROP TABLE fullid');
    await createFullid("(200, 'again')");
    await using node = await startNodeProcess(spec);
    await waitFor(async () => JSON.stringify(await keysOf(node)) === '[200]', {
      timeoutMs: 60_000,
      what: `fullid to serve the table now there (${JSON.stringify(await endpointOf(node, 'fullid'))})`,
    });
    const fullid = await endpointOf(node, 'fullid');
    expect(fullid.decision?.decision).toBe('from-scratch');
    expect(fullid.decision?.reason).toMatch(/fullid/);
  });
});
