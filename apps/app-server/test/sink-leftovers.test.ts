/**
 * What a transfer's PostgreSQL sink keeps for resuming (its `sluice_sink_checkpoints` row) outlives the sink's
 * finish — a successor that takes over before COMPLETED is recorded resumes at the end from it — and is removed
 * once the terminal state is recorded. The fence row stays.
 */
import { mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { createTestDatabase, tempDir, waitFor } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { call, startNodeProcess, waitForState, writeRecords } from './helpers.js';

describe('a PostgreSQL sink leaves nothing behind once its transfer is recorded', () => {
  it('removes the committed checkpoint after COMPLETED (idempotent) and after a fire-and-forget run, keeps the fence', {
    timeout: 90_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_app_leftovers');
    await using dir = await tempDir('sluice-app-leftovers-');
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      await client.query(
        'CREATE TABLE dst (id integer PRIMARY KEY, name text, value double precision, category text)',
      );
      await using node = await startNodeProcess({
        nodeId: 'l1',
        dir: join(dir.path, 'l1'),
        store: db.url,
        roots: [dir.path],
        extraYaml: `connections: { wh: { type: postgres, url: "${db.url}" } }`,
      });
      const source = await writeRecords(join(dir.path, 'in.jsonl'), 120);
      const transfer = (id: string, mode: string) => ({
        id,
        mode,
        source: { type: 'file', path: source, format: 'jsonl' },
        destination: { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' },
        properties: {},
        options: {},
      });
      const checkpointRows = async () =>
        (await client.query<{ writer: string }>('SELECT writer FROM sluice_sink_checkpoints ORDER BY writer'))
          .rows;

      const created = await call(`${node.url}/v1/transfers`, {
        json: transfer('kept-until-recorded', 'idempotent'),
      });
      expect(created.status).toBe(201);
      const done = await waitForState(node.url, 'kept-until-recorded', 'COMPLETED');
      expect(done.result).toMatchObject({ recordsRead: 120, recordsWritten: 120 });
      await waitFor(async () => (await checkpointRows()).length === 0, {
        timeoutMs: 10_000,
        what: 'the sink checkpoint to be removed after COMPLETED',
      });
      const fences = await client.query<{ writer: string; epoch: number }>(
        'SELECT writer, epoch::int AS epoch FROM sluice_sink_fences ORDER BY writer',
      );
      expect(fences.rows).toEqual([{ writer: 'kept-until-recorded:kept-until-recorded.sink', epoch: 1 }]);
      expect((await client.query('SELECT count(*)::int AS n FROM dst')).rows[0].n).toBe(120);

      await client.query('TRUNCATE dst');
      const fired = await call(`${node.url}/v1/transfers`, { json: transfer('fired', 'fire-and-forget') });
      expect(fired.status).toBe(202);
      // A fire-and-forget run leaves nothing either: a later one with the same id must start from scratch.
      await waitFor(
        async () =>
          (await client.query('SELECT count(*)::int AS n FROM dst')).rows[0].n === 120 &&
          (await checkpointRows()).length === 0,
        { timeoutMs: 20_000, what: 'the fire-and-forget run to write everything and remove its checkpoint' },
      );
      await client.query('TRUNCATE dst');
      const again = await call(`${node.url}/v1/transfers`, { json: transfer('fired', 'fire-and-forget') });
      expect(again.status).toBe(202);
      await waitFor(
        async () => (await client.query('SELECT count(*)::int AS n FROM dst')).rows[0].n === 120,
        {
          timeoutMs: 20_000,
          what: 'the second fire-and-forget run with the same id to write every record again',
        },
      );
    } finally {
      await client.end();
    }
  });
});

describe('fire-and-forget runs at shutdown', () => {
  it('defect: runs still going when the node stopped left their staged .partial files in the destination directory, and vanished without a log line', {
    timeout: 60_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_app_ff_shutdown');
    await using dir = await tempDir('sluice-app-ff-shutdown-');
    const out = join(dir.path, 'out');
    await mkdir(out, { recursive: true });
    const node = await startNodeProcess({
      nodeId: 'f1',
      dir: join(dir.path, 'f1'),
      store: `sqlite:${join(dir.path, 'store.db')}`,
      roots: [dir.path],
      transfers: { shutdownGraceMs: 300 },
      extraYaml: `connections: { db: { type: postgres, url: "${db.url}" } }`,
    });
    try {
      const ids = ['ff-a', 'ff-b', 'ff-c'];
      for (const id of ids) {
        // A hundred million rows: the run is still going when the node stops.
        const fired = await call(`${node.url}/v1/transfers`, {
          json: {
            id,
            mode: 'fire-and-forget',
            source: {
              type: 'postgres',
              connection: 'db',
              query: 'select g as id from generate_series(1, 100000000) g',
              key: 'id',
            },
            destination: { type: 'file', path: join(out, `${id}.jsonl`), format: 'jsonl' },
          },
        });
        expect(fired.status).toBe(202);
      }
      const staged = async () => (await readdir(out)).filter((name) => name.endsWith('.partial'));
      await waitFor(async () => (await staged()).length === ids.length, {
        timeoutMs: 20_000,
        what: 'each run to stage its output',
      });
      node.child.kill('SIGTERM');
      const exit = await node.child.exited;
      expect(exit.code).toBe(0);
      // Nothing resumes a fire-and-forget run: what it staged is removed, and nothing is published.
      expect(await readdir(out)).toEqual([]);
      const abandoned = node.child
        .output()
        .split('\n')
        .filter((line) => line.includes('fire-and-forget transfers abandoned at shutdown'));
      expect(abandoned).toHaveLength(1);
      for (const id of ids) expect(abandoned[0]).toContain(id);
    } finally {
      await node[Symbol.asyncDispose]();
    }
  });
});
