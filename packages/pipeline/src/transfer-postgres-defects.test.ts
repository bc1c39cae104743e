/**
 * Defects of the PostgreSQL sink and the polled PostgreSQL source found by probing the data plane: a lost
 * connection, record fields with no column, a missing table. Each against the real server, through `runTransfer`.
 */
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SluiceError, type TransferRequest } from '@sluice/core';
import { createTestDatabase, type TestDatabase, tempDir, waitFor } from '@sluice/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryCheckpointPort } from '../test/helpers.js';
import type { RecordOp } from './ops.js';
import { createPostgresSink } from './sinks/postgres.js';
import { createPostgresSource } from './sources/postgres.js';
import { runTransfer, type TransferContext } from './transfer.js';

const ROWS = 60_000;

describe('PostgreSQL sink and polled source', () => {
  let db: TestDatabase;
  let client: pg.Client;
  beforeAll(async () => {
    db = await createTestDatabase('sluice_pipeline_pgdefects');
    client = new pg.Client({ connectionString: db.url });
    await client.connect();
    // Every committed physical write into a `dst_*` table leaves a row here: a replayed upsert would show.
    await client.query('CREATE TABLE writes (tbl text NOT NULL, id bigint NOT NULL)');
    await client.query(`CREATE FUNCTION count_write() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN INSERT INTO writes VALUES (TG_TABLE_NAME, NEW.id); RETURN NEW; END $$`);
  });
  afterAll(async () => {
    await client?.end();
    await db?.drop();
  });

  const connections = () => ({ wh: { type: 'postgres' as const, url: db.url } });
  const run = (request: TransferRequest, ctx: Partial<TransferContext> = {}) =>
    runTransfer(request, {
      checkpoint: memoryCheckpointPort(),
      connections: connections(),
      signal: new AbortController().signal,
      ...ctx,
    });
  const failure = (promise: Promise<unknown>) =>
    promise.then(
      () => null,
      (err: unknown) => err as SluiceError,
    );
  /** Ends every session of the test database but this file's own client: the sink's or source's included. */
  const terminateBackends = async () => {
    const r = await client.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
      [db.name],
    );
    return r.rowCount ?? 0;
  };
  const jsonl = async (dir: string, name: string, records: unknown[]) => {
    const path = join(dir, name);
    await writeFile(path, `${records.map((r) => JSON.stringify(r)).join('\n')}\n`);
    return path;
  };
  const tableWithWrites = async (table: string, columns: string) => {
    await client.query(`CREATE TABLE ${table} (${columns})`);
    await client.query(
      `CREATE TRIGGER ${table}_counted AFTER INSERT OR UPDATE ON ${table} FOR EACH ROW EXECUTE FUNCTION count_write()`,
    );
  };

  it('defect: a lost connection of the PostgreSQL sink failed the transfer for good (not retryable)', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    await tableWithWrites('dst_loss', 'id bigint PRIMARY KEY, value double precision, category text');
    const path = await jsonl(
      dir.path,
      'in.jsonl',
      Array.from({ length: ROWS }, (_, i) => ({ id: i + 1, value: i * 1.5, category: i % 3 ? 'a' : 'c' })),
    );
    const request: TransferRequest = {
      id: 'sink-loss',
      mode: 'idempotent',
      properties: {},
      source: { type: 'file', path, format: 'jsonl' },
      destination: { type: 'postgres', connection: 'wh', table: 'dst_loss', key: 'id' },
      // Paced: ≥ 3 s, so the backends are terminated mid-run.
      options: { onBadRecord: 'fail', maxRecordsPerSecond: 20_000 },
    };
    const shared = { value: null, epoch: 0 };
    let written = 0;
    const first = failure(
      run(request, {
        checkpoint: memoryCheckpointPort({ shared, epoch: 1 }),
        commitEveryRecords: 1_000,
        onProgress: (p) => {
          written = p.recordsWritten;
        },
      }),
    );
    await waitFor(() => written >= 10_000, { timeoutMs: 20_000, what: 'records written' });
    expect(await terminateBackends()).toBeGreaterThan(0);
    const err = await first;
    expect(written).toBeLessThan(ROWS);
    expect(err?.code).toBe('SINK_FAILED');
    // Retryable: the app-server resumes the transfer from its checkpoint instead of recording it FAILED.
    expect(err?.details, err?.message).toMatchObject({ retryable: true });

    const again = await run(request, { checkpoint: memoryCheckpointPort({ shared, epoch: 2 }) });
    expect(again.decision).toBe('resume');
    expect(again.recordsWritten).toBe(ROWS);
    const rows = await client.query(
      'SELECT count(*)::int AS n, count(DISTINCT id)::int AS d, sum(id)::bigint AS s FROM dst_loss',
    );
    expect(rows.rows[0]).toEqual({ n: ROWS, d: ROWS, s: String((ROWS * (ROWS + 1)) / 2) });
    // Exactly once: what the lost transaction staged was rolled back, and the resume rewrote nothing committed.
    const writes = await client.query(
      `SELECT count(*)::int AS n, count(DISTINCT id)::int AS d FROM writes WHERE tbl = 'dst_loss'`,
    );
    expect(writes.rows[0]).toEqual({ n: ROWS, d: ROWS });
  });

  it('defect: a lost connection of the polled PostgreSQL source failed the transfer for good (not retryable)', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    await client.query('CREATE TABLE src_loss (id bigint PRIMARY KEY, name text NOT NULL)');
    await client.query(`INSERT INTO src_loss SELECT g, 'n' || g FROM generate_series(1, ${ROWS}) g`);
    const out = join(dir.path, 'out.jsonl');
    const request: TransferRequest = {
      id: 'source-loss',
      mode: 'idempotent',
      properties: {},
      source: { type: 'postgres', connection: 'wh', table: 'src_loss', key: 'id' },
      destination: { type: 'file', path: out, format: 'jsonl' },
      options: { onBadRecord: 'fail', maxRecordsPerSecond: 20_000 },
    };
    const shared = { value: null, epoch: 0 };
    let read = 0;
    const first = failure(
      run(request, {
        checkpoint: memoryCheckpointPort({ shared, epoch: 1 }),
        commitEveryRecords: 1_000,
        onProgress: (p) => {
          read = p.recordsRead;
        },
      }),
    );
    await waitFor(() => read >= 10_000, { timeoutMs: 20_000, what: 'records read' });
    expect(await terminateBackends()).toBeGreaterThan(0);
    const err = await first;
    expect(read).toBeLessThan(ROWS);
    expect(err?.code).toBe('SOURCE_FAILED');
    expect(err?.details, err?.message).toMatchObject({ retryable: true });

    const again = await run(request, { checkpoint: memoryCheckpointPort({ shared, epoch: 2 }) });
    expect(again.decision).toBe('resume');
    const ids = (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => (JSON.parse(line) as { id: number }).id);
    expect(ids.length).toBe(ROWS);
    expect(new Set(ids).size).toBe(ROWS);
  });

  it('after a lost connection the sink and the source connect again on their next use', async () => {
    await client.query('CREATE TABLE dst_again (id int PRIMARY KEY, name text)');
    const sink = createPostgresSink({
      handle: 'again.sink',
      url: db.url,
      table: 'dst_again',
      writerId: 'again',
    });
    const source = createPostgresSource({ handle: 'again.source', url: db.url, table: 'dst_again' });
    const upsert = (id: number): RecordOp[] => [
      { op: 'upsert', record: { id, name: `n${id}` }, at: { source: 's', offset: id } },
    ];
    const checkpoint = (epoch: number) => ({ dag: 'd', epoch, positions: {}, at: new Date().toISOString() });
    try {
      await sink.prepare({ decision: 'from-scratch', checkpoint: null });
      await sink.write(upsert(1));
      await sink.commit(checkpoint(1));
      expect(await source.fieldTypes?.()).toMatchObject({ id: 'integer', name: 'string' });
      await sink.write(upsert(2)); // staged in an open transaction, lost with the connection
      expect(await terminateBackends()).toBe(2);
      const lost = await failure(sink.write(upsert(3)));
      expect(lost?.details, lost?.message).toMatchObject({ retryable: true });
      const lostRead = await failure(source.fieldTypes!());
      expect(lostRead?.details, lostRead?.message).toMatchObject({ retryable: true });
      // The dead clients are gone: the next calls connect again.
      expect((await sink.committed())?.epoch).toBe(1);
      await sink.write(upsert(4));
      await sink.commit(checkpoint(2));
      expect(
        await source.canResume({ phase: 'snapshot', lastKey: null, cursor: null, cursorKey: null, read: 0 }),
      ).toEqual({
        ok: true,
      });
      const rows = await client.query('SELECT id FROM dst_again ORDER BY id');
      expect(rows.rows.map((r) => r.id)).toEqual([1, 4]);
    } finally {
      await sink.close();
      await source.close();
    }
  });

  it('an unreachable server is retryable, and never makes a resume start from scratch', async () => {
    const unreachable = 'postgres://root@127.0.0.1:1/test'; // nothing listens on port 1: ECONNREFUSED
    const source = createPostgresSource({ handle: 'down.source', url: unreachable, table: 't' });
    const sink = createPostgresSink({ handle: 'down.sink', url: unreachable, table: 't', writerId: 'down' });
    try {
      const position = { phase: 'snapshot', lastKey: ['5'], cursor: null, cursorKey: null, read: 5 };
      // Not `{ ok: false }`: that would restart the transfer from scratch and write committed records again.
      const check = await failure(source.canResume(position));
      expect(check?.code, check?.message).toBe('SOURCE_FAILED');
      expect(check?.details).toMatchObject({ retryable: true });
      const open = await failure(sink.committed());
      expect(open?.code, open?.message).toBe('SINK_FAILED');
      expect(open?.details).toMatchObject({ retryable: true });
    } finally {
      await source.close();
      await sink.close();
    }
  });

  it('defect: the PostgreSQL sink dropped record fields with no matching column and reported success', async () => {
    await using dir = await tempDir();
    await tableWithWrites('dst_fields', 'id int PRIMARY KEY, value int, name text');
    await client.query(`INSERT INTO dst_fields VALUES (1, 10, 'keep')`);
    const path = await jsonl(dir.path, 'fields.jsonl', [
      { id: 1, Value: 2, nme: 'x' },
      { id: 2, valu: 3 },
      // A record without some columns is still the whole row: `name` becomes NULL.
      { id: 3, value: 30 },
    ]);
    const request = (onBadRecord: 'skip' | 'fail'): TransferRequest => ({
      id: `fields-${onBadRecord}`,
      mode: 'idempotent',
      properties: {},
      source: { type: 'file', path, format: 'jsonl' },
      destination: { type: 'postgres', connection: 'wh', table: 'dst_fields', key: 'id' },
      options: { onBadRecord },
    });

    const failed = await failure(run(request('fail')));
    expect(failed?.code, failed?.message).toBe('BAD_RECORD');
    expect(failed?.message).toMatch(/line 1\b.*Value, nme.*dst_fields/);
    expect((await client.query('SELECT count(*)::int AS n FROM dst_fields')).rows[0].n).toBe(1);

    const result = await run(request('skip'));
    expect(result).toMatchObject({ recordsRead: 3, recordsWritten: 1, badRecords: 2 });
    expect(result.badRecordReports.map((r) => [r.line, r.reason])).toEqual([
      [1, 'field(s) Value, nme are not columns of table dst_fields'],
      [2, 'field(s) valu are not columns of table dst_fields'],
    ]);
    const rows = await client.query('SELECT id, value, name FROM dst_fields ORDER BY id');
    expect(rows.rows).toEqual([
      { id: 1, value: 10, name: 'keep' },
      { id: 3, value: 30, name: null },
    ]);
  });

  it('defect: one value the destination column refuses failed the whole transfer (SINK_FAILED) instead of being a bad record', async () => {
    await using dir = await tempDir();
    await tableWithWrites(
      'dst_values',
      'id int PRIMARY KEY, value double precision, name text NOT NULL, qty int CHECK (qty >= 0)',
    );
    const path = await jsonl(dir.path, 'values.jsonl', [
      { id: 1, value: 1.5, name: 'a', qty: 1 },
      { id: 2, value: 'abc', name: 'b', qty: 2 }, // not a double precision
      { id: 3, value: 3, name: 'c', qty: 3 },
      { id: 4, value: 4, name: null, qty: 4 }, // NOT NULL
      { id: 5, value: 5, name: 'e', qty: -5 }, // CHECK
      { id: 6, value: 6, name: 'f', qty: 6 },
    ]);
    const request = (onBadRecord: 'skip' | 'fail'): TransferRequest => ({
      id: `values-${onBadRecord}`,
      mode: 'idempotent',
      properties: {},
      source: { type: 'file', path, format: 'jsonl' },
      destination: { type: 'postgres', connection: 'wh', table: 'dst_values', key: 'id' },
      options: { onBadRecord },
    });

    const failed = await failure(run(request('fail')));
    expect(failed?.code, failed?.message).toBe('BAD_RECORD');
    expect(failed?.message).toMatch(/line 2\b.*double precision.*abc/);
    expect((await client.query('SELECT count(*)::int AS n FROM dst_values')).rows[0].n).toBe(0);

    const result = await run(request('skip'));
    expect(result).toMatchObject({ recordsRead: 6, recordsWritten: 3, badRecords: 3 });
    expect(result.badRecordReports.map((r) => r.line)).toEqual([2, 4, 5]);
    expect(result.badRecordReports[0]?.reason).toMatch(/double precision.*"abc"/);
    expect(result.badRecordReports[1]?.reason).toMatch(/null value in column "name"/);
    expect(result.badRecordReports[2]?.reason).toMatch(/check constraint/);
    const rows = await client.query('SELECT id, value, name, qty FROM dst_values ORDER BY id');
    expect(rows.rows).toEqual([
      { id: 1, value: 1.5, name: 'a', qty: 1 },
      { id: 3, value: 3, name: 'c', qty: 3 },
      { id: 6, value: 6, name: 'f', qty: 6 },
    ]);
    // Each accepted record physically written once: the refused ones' attempts left nothing behind.
    const writes = await client.query(`SELECT id::int FROM writes WHERE tbl = 'dst_values' ORDER BY id`);
    expect(writes.rows.map((r) => r.id)).toEqual([1, 3, 6]);
  });

  it('defect: a "key" that is not unique, or is NULL in a row, silently skipped rows of the source (keyset paging) and the transfer COMPLETED', async () => {
    await using dir = await tempDir();
    await client.query('CREATE TABLE src_groups (id int PRIMARY KEY, grp int, tag text)');
    // grp repeats (3 rows each), so pages of 10 end inside a group; tag is NULL in one row.
    await client.query(
      `INSERT INTO src_groups SELECT g, g / 3, CASE WHEN g = 17 THEN NULL ELSE 't' || lpad(g::text, 3, '0') END FROM generate_series(1, 25) g`,
    );
    const attempt = (id: string, source: TransferRequest['source']) => {
      const out = join(dir.path, `${id}.jsonl`);
      const request: TransferRequest = {
        id,
        mode: 'idempotent',
        properties: {},
        source,
        destination: { type: 'file', path: out, format: 'jsonl' },
        options: { onBadRecord: 'skip', batchSize: 10 },
      };
      return {
        out,
        outcome: run(request).then(
          (result) => ({ result, err: null }),
          (err: SluiceError) => ({ result: null, err }),
        ),
      };
    };
    const cases = [
      attempt('dup-query', {
        type: 'postgres',
        connection: 'wh',
        query: 'SELECT id, grp FROM src_groups',
        key: 'grp',
      }),
      attempt('dup-table', { type: 'postgres', connection: 'wh', table: 'src_groups', key: 'grp' }),
      attempt('null-key', { type: 'postgres', connection: 'wh', table: 'src_groups', key: 'tag' }),
    ];
    const seen: string[] = [];
    const published: boolean[] = [];
    for (const c of cases) {
      const { result, err } = await c.outcome;
      seen.push(
        result
          ? `COMPLETED read ${result.recordsRead} of 25`
          : `${err?.code} retryable=${err?.details?.retryable === true} ${/not unique|NULL/.test(err?.message ?? '') ? 'named' : err?.message}`,
      );
      // Nothing published: a source that cannot be read whole is not copied in part.
      published.push(existsSync(c.out));
    }
    expect(seen).toEqual([
      'SOURCE_FAILED retryable=false named',
      'SOURCE_FAILED retryable=false named',
      'SOURCE_FAILED retryable=false named',
    ]);
    expect(published).toEqual([false, false, false]);
    // A unique key with no NULLs still pages through every row.
    const unique = attempt('unique-key', {
      type: 'postgres',
      connection: 'wh',
      table: 'src_groups',
      key: 'id',
    });
    const { result } = await unique.outcome;
    expect(result?.recordsRead).toBe(25);
  });

  it('defect: a destination "key" that is no column of the table COMPLETED with every record a bad record; one without a unique index failed only at the first write', async () => {
    await using dir = await tempDir();
    await tableWithWrites('dst_keys', 'id int PRIMARY KEY, code text, value int');
    const path = await jsonl(dir.path, 'keys.jsonl', [
      { id: 1, code: 'a', value: 1 },
      { id: 2, code: 'b', value: 2 },
    ]);
    const into = (id: string, key: string) =>
      failure(
        run({
          id,
          mode: 'idempotent',
          properties: {},
          source: { type: 'file', path, format: 'jsonl' },
          destination: { type: 'postgres', connection: 'wh', table: 'dst_keys', key },
          options: { onBadRecord: 'skip' },
        }),
      );
    const noColumn = await into('key-no-column', 'nosuch');
    expect(noColumn?.code, noColumn?.message).toBe('SINK_FAILED');
    expect(noColumn?.message).toMatch(/key column\(s\) nosuch .*not columns of table dst_keys/);
    expect(noColumn?.details?.retryable).not.toBe(true);
    const notUnique = await into('key-not-unique', 'code');
    expect(notUnique?.code, notUnique?.message).toBe('SINK_FAILED');
    expect(notUnique?.message).toMatch(/no unique index on \(code\)/);
    expect(notUnique?.details?.retryable).not.toBe(true);
    // Nothing was read into the table, nothing written.
    expect(
      (await client.query(`SELECT count(*)::int AS n FROM writes WHERE tbl = 'dst_keys'`)).rows[0].n,
    ).toBe(0);
  });

  it('defect: a PostgreSQL → PostgreSQL copy refused every row with a point or circle column (read as {x, y} objects) as a bad record', async () => {
    await client.query(
      'CREATE TABLE src_geo (id bigint PRIMARY KEY, p point, c circle, ps point[], cs circle[])',
    );
    await client.query(`INSERT INTO src_geo VALUES
      (1, '(1.5,-2)', '<(0,0),3>', ARRAY['(1,2)','(3,4)']::point[], ARRAY['<(1,1),0.5>']::circle[]),
      (2, NULL, NULL, NULL, NULL),
      (3, '(0,0)', '<(-1,2.25),1e-3>', ARRAY[NULL, '(5,6)']::point[], '{}')`);
    await client.query('CREATE TABLE dst_geo (LIKE src_geo INCLUDING ALL)');
    const result = await run({
      id: 'pg-geometry',
      mode: 'idempotent',
      source: { type: 'postgres', connection: 'wh', table: 'src_geo', key: 'id' },
      destination: { type: 'postgres', connection: 'wh', table: 'dst_geo', key: 'id' },
      properties: {},
      options: { onBadRecord: 'skip' },
    });
    expect({
      written: result.recordsWritten,
      bad: result.badRecords,
      reports: result.badRecordReports,
    }).toEqual({
      written: 3,
      bad: 0,
      reports: [],
    });
    // Equal as PostgreSQL sees them (point has no = operator: compared by their text).
    const text = (table: string) =>
      client.query(`SELECT id, p::text, c::text, ps::text, cs::text FROM ${table} ORDER BY id`);
    expect((await text('dst_geo')).rows).toEqual((await text('src_geo')).rows);
  });

  it('defect: a missing source table failed the transfer as INTERNAL', async () => {
    await using dir = await tempDir();
    const err = await failure(
      run({
        id: 'no-source-table',
        mode: 'idempotent',
        properties: {},
        source: { type: 'postgres', connection: 'wh', table: 'nosuchtable' },
        destination: { type: 'file', path: join(dir.path, 'out.jsonl'), format: 'jsonl' },
        options: { onBadRecord: 'skip' },
      }),
    );
    expect(err).toBeInstanceOf(SluiceError);
    expect(err?.code, err?.message).toBe('SOURCE_FAILED');
    expect(err?.message).toMatch(/nosuchtable.*does not exist/);
    expect(err?.details?.retryable).not.toBe(true);
  });

  it('defect: an integer past 2^53 inside a json/jsonb column was copied with other digits, without a word', async () => {
    await using dir = await tempDir();
    await client.query('CREATE TABLE src_docs (id int PRIMARY KEY, doc jsonb, raw json, docs jsonb[])');
    await client.query(
      `INSERT INTO src_docs VALUES
        (1, '{"a": 12345678901234567890}', '{"a": 1}', NULL),
        (2, '{"a": 1, "s": "12345678901234567890"}', '[9007199254740993]', NULL),
        (3, '{"a": 2.5, "big": 9007199254740992}', '{"b": [1e300]}', ARRAY['{"n": 1}', '{"n": 90071992547409931}']::jsonb[]),
        (4, '{"a": 4}', '{"b": 1e400}', NULL),
        (5, '{"a": 5}', null, ARRAY['{"n": 5}']::jsonb[])`,
    );
    const out = join(dir.path, 'docs.jsonl');
    const result = await run({
      id: 'json-numbers',
      mode: 'idempotent',
      properties: {},
      source: { type: 'postgres', connection: 'wh', table: 'src_docs', key: 'id' },
      destination: { type: 'file', path: out, format: 'jsonl' },
      options: { onBadRecord: 'skip' },
    });
    // Each copied value is the one PostgreSQL holds; a row with a number no JSON reader holds exactly is a bad
    // record naming it (as the JSONL source does), never a copy with other digits.
    const copied = (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { id: number });
    expect(copied.map((r) => r.id)).toEqual([5]);
    expect(result).toMatchObject({ recordsRead: 5, recordsWritten: 1, badRecords: 4 });
    expect(result.badRecordReports.map((r) => r.reason)).toEqual([
      expect.stringMatching(/12345678901234567890 cannot be held exactly/),
      expect.stringMatching(/9007199254740993 cannot be held exactly/),
      expect.stringMatching(/90071992547409931 cannot be held exactly/),
      expect.stringMatching(/1e400 is out of range/),
    ]);
  });

  it('a missing destination table fails the transfer as SINK_FAILED naming it (not retryable)', async () => {
    await using dir = await tempDir();
    const path = await jsonl(dir.path, 'one.jsonl', [{ id: 1 }]);
    const err = await failure(
      run({
        id: 'no-sink-table',
        mode: 'idempotent',
        properties: {},
        source: { type: 'file', path, format: 'jsonl' },
        destination: { type: 'postgres', connection: 'wh', table: 'nosuchdst', key: 'id' },
        options: { onBadRecord: 'skip' },
      }),
    );
    expect(err?.code).toBe('SINK_FAILED');
    expect(err?.message).toMatch(/nosuchdst.*does not exist/);
    expect(err?.details?.retryable).not.toBe(true);
  });
});
