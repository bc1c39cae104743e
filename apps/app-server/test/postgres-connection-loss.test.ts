/**
 * A transfer whose PostgreSQL sessions are terminated mid-run (a failover, a DBA's `pg_terminate_backend`, a
 * network cut) is resumed from its checkpoint by the app-server and completes, every record written once.
 */
import { join } from 'node:path';
import { createTestDatabase, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, createCountedDestination, exactlyOnce, startNodeProcess, writeRecords } from './helpers.js';

const ROWS = 60_000;

describe('PostgreSQL connections lost mid-transfer', () => {
  it('defect: terminated PostgreSQL backends failed the transfers for good (SINK_FAILED / SOURCE_FAILED, no retry)', {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_app_pgloss');
    await using dir = await tempDir('sluice-app-pgloss-');
    // Every committed physical write into dst is counted: a replayed or duplicated write would show.
    const writes = await createCountedDestination(db.url);
    await sql(db.url, 'CREATE TABLE src (id integer PRIMARY KEY, name text NOT NULL)');
    await sql(db.url, `INSERT INTO src SELECT g, 'n' || g FROM generate_series(1, ${ROWS}) g`);
    // The store is SQLite: only the transfers' own sessions are in the database whose backends are terminated.
    await using node = await startNodeProcess({
      nodeId: 'g1',
      dir: join(dir.path, 'g1'),
      store: `sqlite:${join(dir.path, 'store.db')}`,
      roots: [dir.path],
      pipeline: { commitEveryRecords: 1_000, commitEveryMs: 5_000 },
      extraYaml: `connections: { wh: { type: postgres, url: "${db.url}" } }`,
    });
    const input = await writeRecords(join(dir.path, 'in.jsonl'), ROWS);
    const out = join(dir.path, 'out.jsonl');
    // Paced (≥ 3 s each), so the backends are terminated while both run.
    const options = { maxRecordsPerSecond: 20_000 };
    const intoPostgres = {
      id: 'into-pg',
      mode: 'idempotent',
      source: { type: 'file', path: input, format: 'jsonl' },
      destination: { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' },
      properties: {},
      options,
    };
    const fromPostgres = {
      id: 'from-pg',
      mode: 'idempotent',
      source: { type: 'postgres', connection: 'wh', table: 'src', key: 'id' },
      destination: { type: 'file', path: out, format: 'jsonl' },
      properties: {},
      options,
    };
    expect((await call(`${node.url}/v1/transfers`, { json: intoPostgres })).status).toBe(201);
    expect((await call(`${node.url}/v1/transfers`, { json: fromPostgres })).status).toBe(201);
    const read = async (id: string) =>
      ((await call(`${node.url}/v1/transfers/${id}`)).body.progress?.recordsRead as number | undefined) ?? 0;
    await waitFor(async () => (await read('into-pg')) >= 5_000 && (await read('from-pg')) >= 5_000, {
      timeoutMs: 30_000,
      what: 'both transfers to be under way',
    });
    const terminated = await sql<{ n: number }>(
      db.url,
      `SELECT count(*)::int AS n FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = $1 AND pid <> pg_backend_pid()) t`,
      [db.name],
    );
    expect(terminated[0]!.n).toBeGreaterThanOrEqual(2);

    const ended = async (id: string) =>
      waitFor(
        async () => {
          const body = (await call(`${node.url}/v1/transfers/${id}`)).body;
          return ['COMPLETED', 'FAILED', 'TERMINATED'].includes(body.state) ? body : null;
        },
        { timeoutMs: 60_000, intervalMs: 200, what: `transfer ${id} to end` },
      );
    const [into, from] = [await ended('into-pg'), await ended('from-pg')];
    expect({ state: into.state, error: into.error }).toEqual({ state: 'COMPLETED', error: null });
    expect({ state: from.state, error: from.error }).toEqual({ state: 'COMPLETED', error: null });
    // Resumed, not restarted from scratch by hand: a second attempt of the same transfer.
    expect(into.attempts).toBeGreaterThanOrEqual(2);
    expect(from.attempts).toBeGreaterThanOrEqual(2);
    expect(into.result).toMatchObject({ recordsRead: ROWS, recordsWritten: ROWS, badRecords: 0 });
    expect(from.result).toMatchObject({ recordsRead: ROWS, recordsWritten: ROWS, badRecords: 0 });

    const [rows] = await sql(db.url, 'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d FROM dst');
    expect(rows).toEqual({ n: ROWS, d: ROWS });
    expect(await writes.counts()).toEqual({ n: ROWS, d: ROWS });
    expect(await exactlyOnce(out, ROWS)).toBeNull();
  });
});
