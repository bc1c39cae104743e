/**
 * Endpoints over PostgreSQL tables a migration has not created yet, and over a PostgreSQL that is down when the
 * app-server starts, against a real private PostgreSQL with `wal_level=logical`: each endpoint waits (retrying with
 * back-off, naming the setting), and serves the table once it is there, with no restart and no Rebuild.
 */
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { endpointOf } from './replication-node.js';

const postgres = logicalPostgresPerFile();

/** Two endpoints over database `url`: `mirrored` reads table `mirrored` by replication, `polled` polls `polled` by its cursor. */
function twoEndpointsYaml(url: string): string {
  return [
    'connections:',
    `  db: { type: postgres, url: "${url}" }`,
    'endpoints:',
    '  - name: mirrored',
    '    source: { type: postgres, connection: db, table: mirrored }',
    '    primaryKey: [id]',
    '    fields: { id: integer, v: integer }',
    '  - name: polled',
    '    source: { type: postgres, connection: db, table: polled, key: [id], cursor: id }',
    '    primaryKey: [id]',
    '    fields: { id: integer, v: integer }',
  ].join('\n');
}

const createAndFill = (table: string) => [
  `CREATE TABLE ${table} (id int PRIMARY KEY, v int NOT NULL)`,
  `INSERT INTO ${table} SELECT g, g * 3 FROM generate_series(1, 40) g`,
];

describe('endpoints whose PostgreSQL source is not there yet', () => {
  it('defect: a table not created yet failed the endpoint for good', { timeout: 120_000 }, async () => {
    await using dir = await tempDir('sluice-app-table-not-ready-');
    const url = await postgres().createDatabase('later');
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: twoEndpointsYaml(url),
    });

    for (const [index, name] of ['mirrored', 'polled'].entries()) {
      const waiting = await endpointOf(node, name);
      expect(waiting).toMatchObject({ phase: 'retrying', error: { code: 'SOURCE_FAILED' } });
      expect(waiting.error!.message).toContain(`endpoints[${index}].source.table`);
    }

    // The migration runs: both endpoints serve their table, and follow it.
    for (const statement of [...createAndFill('mirrored'), ...createAndFill('polled')])
      await sql(url, statement);
    for (const name of ['mirrored', 'polled'])
      await waitFor(async () => (await endpointOf(node, name)).records === 40, {
        timeoutMs: 60_000,
        what: `${name} to serve its table once created`,
      });
    await sql(url, 'INSERT INTO mirrored VALUES (41, 123)');
    await sql(url, 'INSERT INTO polled VALUES (41, 123)');
    for (const name of ['mirrored', 'polled']) {
      await waitFor(async () => (await endpointOf(node, name)).records === 41, {
        timeoutMs: 60_000,
        what: `${name} to follow its table`,
      });
      expect(await endpointOf(node, name)).toMatchObject({ error: null, retry: null });
    }
  });

  it('an endpoint polling by cursor whose PostgreSQL is down at start-up waits, then serves', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-poll-down-');
    const url = await postgres().createDatabase('down');
    for (const statement of createAndFill('polled')) await sql(url, statement);
    await postgres().stop('fast');
    try {
      await using node = await startNodeProcess({
        ...localNode('h1', dir.path),
        extraYaml: twoEndpointsYaml(url),
      });
      expect(await endpointOf(node, 'polled')).toMatchObject({
        phase: 'retrying',
        error: { code: 'SOURCE_FAILED' },
        servingCache: null,
      });
      await postgres().start();
      await waitFor(async () => (await endpointOf(node, 'polled')).records === 40, {
        timeoutMs: 60_000,
        what: 'polled to serve once PostgreSQL is back',
      });
      expect(await endpointOf(node, 'polled')).toMatchObject({ error: null, retry: null });
    } finally {
      await postgres().start();
    }
  });
});
