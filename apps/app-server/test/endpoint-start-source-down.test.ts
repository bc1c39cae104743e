/**
 * An app-server restarted while its endpoint's PostgreSQL is down (restarting, a network cut) against a real private
 * PostgreSQL with `wal_level=logical`: the pipeline cannot start, and must start by itself once PostgreSQL answers —
 * the failure is a lost connection (retryable), not a misconfiguration waiting for an operator's Rebuild. Found by the
 * CDC chaos run with overlapping faults (an app-server SIGKILL during a PostgreSQL restart).
 */
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';

const postgres = logicalPostgresPerFile();

const ENDPOINT_YAML = (url: string) =>
  [
    'connections:',
    `  db: { type: postgres, url: "${url}" }`,
    'endpoints:',
    '  - name: items',
    '    source: { type: postgres, connection: db, table: items }',
    '    primaryKey: [id]',
    '    fields: { id: integer, v: integer }',
  ].join('\n');

describe('an endpoint whose source is down at start-up', () => {
  it('defect: an app-server started while PostgreSQL is down leaves the endpoint failed until someone rebuilds it', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-source-down-');
    const url = await postgres().createDatabase('down');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)');
    await sql(url, 'INSERT INTO items SELECT g, g FROM generate_series(1, 30) g');
    const spec = { ...localNode('h1', dir.path), extraYaml: ENDPOINT_YAML(url) };
    const statusOf = async (nodeUrl: string) =>
      (await call(`${nodeUrl}/v1/endpoints`)).body.endpoints.find(
        (e: { name: string }) => e.name === 'items',
      );

    // First life: the endpoint serves its snapshot (a cache, a slot, a checkpoint to resume from).
    {
      await using first = await startNodeProcess(spec);
      await waitFor(async () => (await statusOf(first.url))?.records === 30, {
        timeoutMs: 60_000,
        what: 'the first snapshot',
      });
    }

    // Second life starts while PostgreSQL is down: the pipeline cannot start, for now.
    await postgres().stop('fast');
    await using node = await startNodeProcess(spec);
    expect(await statusOf(node.url)).toMatchObject({ phase: 'failed', error: { code: 'SOURCE_FAILED' } });

    // PostgreSQL is back and the table changes: the endpoint resumes and follows, with no Rebuild from anyone.
    await postgres().start();
    await sql(url, 'INSERT INTO items VALUES (31, 31)');
    await waitFor(async () => (await statusOf(node.url))?.records === 31, {
      timeoutMs: 60_000,
      what: 'the endpoint to start by itself and stream the change made after PostgreSQL came back',
    });
    expect(await statusOf(node.url)).toMatchObject({
      phase: expect.not.stringMatching(/^failed$/),
      error: null,
      decision: { decision: 'resume' },
    });
  });
});
