/**
 * An endpoint whose pipeline failed to start (here: a replicated table without a primary key) against a real
 * PostgreSQL with `wal_level=logical`: it stays listed with its error, steering it answers 409
 * `ENDPOINT_NOT_RUNNING` naming the endpoint (the reason in the detail), and Rebuild starts its pipeline again —
 * failing again with the same clear error while the cause remains, serving once the table is fixed, no restart.
 */
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { databaseWith, endpointOf, replicatedEndpointYaml } from './replication-node.js';

const postgres = logicalPostgresPerFile();

describe('a failed endpoint', () => {
  it('defect: Rebuild retries a failed endpoint, and its errors name the endpoint with a 409', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-failed-');
    const url = await databaseWith(
      postgres(),
      'failed',
      'CREATE TABLE idxid (a int NOT NULL, b int)',
      'INSERT INTO idxid SELECT g, g FROM generate_series(1, 30) g',
    );
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: replicatedEndpointYaml(url, {
        name: 'idxid',
        primaryKey: 'a',
        fields: '{ a: integer, b: integer }',
      }),
    });
    const statusOf = () => endpointOf(node, 'idxid');
    expect(await statusOf()).toMatchObject({
      name: 'idxid',
      phase: 'failed',
      error: { code: 'REPLICA_IDENTITY_MISSING' },
    });

    // The cause remains: Rebuild tries again and fails again, with the endpoint's name and the reason apart.
    const again = await call(`${node.url}/v1/endpoints/idxid/rebuild`, { method: 'POST' });
    expect(again.status).toBe(409);
    expect(again.headers.get('content-type')).toContain('application/problem+json');
    expect(again.body).toMatchObject({
      code: 'ENDPOINT_NOT_RUNNING',
      endpoint: 'idxid',
      failure: { code: 'REPLICA_IDENTITY_MISSING' },
    });
    expect(again.body.detail).toMatch(/^Endpoint "idxid" is not running: .*primary key/);
    expect(again.body.detail).not.toContain('\\"');
    // Steering that needs a running pipeline says so the same way (never a 404 for a listed endpoint).
    for (const action of ['promote', 'rollback']) {
      const refused = await call(`${node.url}/v1/endpoints/idxid/${action}`, { method: 'POST' });
      expect(refused.status).toBe(409);
      expect(refused.body).toMatchObject({ code: 'ENDPOINT_NOT_RUNNING', endpoint: 'idxid' });
    }
    expect(await statusOf()).toMatchObject({ phase: 'failed', error: { code: 'REPLICA_IDENTITY_MISSING' } });

    // Fixed at the source: Rebuild starts the pipeline, which snapshots the table and streams its changes.
    await sql(url, 'ALTER TABLE idxid ADD PRIMARY KEY (a)');
    const retried = await call(`${node.url}/v1/endpoints/idxid/rebuild`, { method: 'POST' });
    expect(retried.status).toBe(202);
    expect(retried.body).toMatchObject({ endpoint: 'idxid' });
    await waitFor(async () => (await statusOf())?.records === 30, {
      timeoutMs: 60_000,
      what: 'idxid to serve its snapshot after the retry',
    });
    expect(await statusOf()).toMatchObject({ error: null, replication: { slot: 'sluice_h1_idxid_source' } });
    await sql(url, 'INSERT INTO idxid VALUES (31, 31)');
    await waitFor(async () => (await statusOf())?.records === 31, { what: 'idxid to stream a change' });
  });
});
