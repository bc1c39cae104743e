import { createTestDatabase } from '@sluice/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SourceItem } from '../types.js';
import { createPostgresSource } from './postgres.js';

describe('PostgreSQL source: keyset snapshot, then incremental by cursor', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let client: pg.Client;
  beforeAll(async () => {
    db = await createTestDatabase('sluice_pipeline_pgsrc');
    client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query('CREATE TABLE t (a int, b text, v int, seq bigserial, PRIMARY KEY (a, b))');
    await client.query(`INSERT INTO t (a, b, v) SELECT g % 10, 'k' || g, g FROM generate_series(1, 250) g`);
  });
  afterAll(async () => {
    await client?.end();
    await db?.drop();
  });

  /** Pulls items until `until` says stop; returns them and the iterator's abort. */
  async function pull(from: unknown | null, until: (items: SourceItem[]) => boolean) {
    const source = createPostgresSource({
      handle: 't.source',
      url: db.url,
      table: 't',
      cursor: 'seq',
      pageSize: 40,
      pollMs: 50,
    });
    const controller = new AbortController();
    const items: SourceItem[] = [];
    try {
      for await (const item of source.read(from, {
        signal: controller.signal,
        mode: 'endpoint',
        batchSize: 40,
      })) {
        items.push(item);
        if (until(items)) break;
      }
    } finally {
      controller.abort();
      await source.close();
    }
    return items;
  }
  const records = (items: SourceItem[]) =>
    items.flatMap((i) =>
      i.kind === 'records' ? i.ops.map((op) => (op.op === 'delete' ? null : op.record)) : [],
    );

  it('pages by composite key, marks the snapshot, then reads new rows; resumes from its cursor', async () => {
    const first = await pull(null, (items) => items.some((i) => i.kind === 'snapshot-done'));
    const snapshot = records(first);
    expect(snapshot).toHaveLength(250);
    expect(new Set(snapshot.map((r) => `${r!.a}/${r!.b}`)).size).toBe(250);
    const done = first.find((i) => i.kind === 'snapshot-done')!;
    expect(done.position).toMatchObject({ phase: 'incremental', read: 250 });

    await client.query(`INSERT INTO t (a, b, v) VALUES (1, 'new1', 1), (2, 'new2', 2)`);
    await client.query(`UPDATE t SET v = -1, seq = nextval('t_seq_seq') WHERE a = 3 AND b = 'k3'`);
    const next = await pull(done.position, (items) => records(items).length >= 3);
    expect(next[0]!.kind).toBe('snapshot-done'); // resumed in the incremental phase
    expect(records(next).map((r) => `${r!.a}/${r!.b}/${r!.v}`)).toEqual(['1/new1/1', '2/new2/2', '3/k3/-1']);

    const source = createPostgresSource({ handle: 't.source', url: db.url, table: 't', cursor: 'seq' });
    try {
      expect(await source.canResume(done.position)).toEqual({ ok: true });
      expect((await source.canResume({ nonsense: true })).ok).toBe(false);
    } finally {
      await source.close();
    }
  });
});

describe('PostgreSQL source: column names are identifiers', () => {
  it('defect: a table keyed on a column whose name holds a dot (and a dotted cursor column) failed every page: the key and cursor columns were split at the dot', async () => {
    const db = await createTestDatabase('sluice_pipeline_pgsrc_dots');
    try {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      try {
        await client.query(
          'CREATE TABLE lines ("order.id" text, "Line" int, v text, "change.seq" bigserial, PRIMARY KEY ("order.id", "Line"))',
        );
        await client.query(
          `INSERT INTO lines ("order.id", "Line", v) SELECT 'o-' || (g % 3), g, 'v' || g FROM generate_series(1, 25) g`,
        );
      } finally {
        await client.end();
      }
      const source = createPostgresSource({
        handle: 'lines.source',
        url: db.url,
        table: 'lines',
        cursor: 'change.seq',
        pageSize: 10,
        pollMs: 50,
      });
      const controller = new AbortController();
      const items: SourceItem[] = [];
      try {
        // Before: SOURCE_FAILED "table lines does not exist" on the first page (PostgreSQL said `missing FROM-clause
        // entry for table "order"`, whose code 42P01 read as the table missing).
        for await (const item of source.read(null, {
          signal: controller.signal,
          mode: 'endpoint',
          batchSize: 10,
        })) {
          items.push(item);
          if (item.kind === 'snapshot-done') break;
        }
      } finally {
        controller.abort();
        await source.close();
      }
      const read = items.flatMap((i) =>
        i.kind === 'records' ? i.ops.map((op) => (op.op === 'delete' ? null : op.record)) : [],
      );
      expect(read).toHaveLength(25);
      expect(new Set(read.map((r) => `${r!['order.id']}/${r!.Line}`)).size).toBe(25);
      expect(read.find((r) => r!.Line === 7)).toMatchObject({ 'order.id': 'o-1', Line: 7, v: 'v7' });
    } finally {
      await db.drop();
    }
  });
});
