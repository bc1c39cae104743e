/**
 * PostgreSQL logical replication as a transfer source, through real app-server processes (issue 16): a snapshot-only
 * transfer completes and its slot is dropped once COMPLETED is recorded; `options.follow` streams changes until
 * POST terminate (and is refused for a source that cannot follow); an owner SIGKILLed mid-stream is taken over by
 * another node, which resumes the same slot from the sink's committed LSN and applies every change once.
 */
import { join } from 'node:path';
import {
  createTestDatabase,
  type LogicalPostgresHandle,
  type NatsServerHandle,
  perKeyWriteMismatches,
  type SourceWriter,
  spawnTs,
  sql,
  startLogicalPostgres,
  startNatsServer,
  startSourceWriter,
  type TempDir,
  type TestDatabase,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, call, type NodeProcess, startNodeProcess, waitForState } from './helpers.js';

let source: LogicalPostgresHandle;
let store: TestDatabase;
let nats: NatsServerHandle;
let dir: TempDir;

beforeAll(async () => {
  [source, store, nats, dir] = await Promise.all([
    startLogicalPostgres(),
    createTestDatabase('sluice_app_cdc'),
    startNatsServer(),
    tempDir('sluice-app-cdc-'),
  ]);
}, 120_000);

afterAll(async () => {
  await source?.[Symbol.asyncDispose]();
  await store?.[Symbol.asyncDispose]();
  await nats?.[Symbol.asyncDispose]();
  await dir?.[Symbol.asyncDispose]();
});

function startNode(nodeId: string, url: string): Promise<NodeProcess> {
  return startNodeProcess({
    nodeId,
    dir: join(dir.path, nodeId),
    store: store.url,
    nats: nats.url,
    roots: [dir.path],
    extraYaml: `connections: { db: { type: postgres, url: "${url}" } }`,
  });
}

/** `items` (source) and `dst` (destination); every physical write into `dst` is counted in `dst_writes`. */
async function database(rows: number): Promise<string> {
  const url = await source.createDatabase('app_cdc');
  await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)');
  await sql(url, `INSERT INTO items SELECT i, 0 FROM generate_series(1, ${rows}) i`);
  await sql(url, 'CREATE TABLE dst (id int PRIMARY KEY, v int NOT NULL)');
  await sql(url, 'CREATE TABLE dst_writes (id int NOT NULL, op text NOT NULL)');
  await sql(
    url,
    `CREATE FUNCTION count_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
       INSERT INTO dst_writes VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END, TG_OP); RETURN NULL; END $$`,
  );
  await sql(
    url,
    'CREATE TRIGGER dst_counted AFTER INSERT OR UPDATE OR DELETE ON dst FOR EACH ROW EXECUTE FUNCTION count_write()',
  );
  return url;
}

const transfer = (id: string, options: Record<string, unknown> = {}) => ({
  id,
  mode: 'idempotent',
  source: { type: 'postgres', connection: 'db', table: 'items', capture: 'replication' },
  destination: { type: 'postgres', connection: 'db', table: 'dst', key: 'id' },
  properties: {},
  options,
});

const rowsOf = async (url: string, table: string) =>
  (await sql<{ row: string }>(url, `SELECT row_to_json(t)::text AS row FROM ${table} t ORDER BY id`)).map(
    (r) => r.row,
  );

const mirrored = async (url: string) =>
  JSON.stringify(await rowsOf(url, 'items')) === JSON.stringify(await rowsOf(url, 'dst'));

/** Sluice transfer slots and publications left in the database. */
async function leftovers(url: string) {
  const slots = await sql(
    url,
    `SELECT 1 FROM pg_replication_slots WHERE starts_with(slot_name, 'sluice_x_')`,
  );
  const publications = await sql(url, `SELECT 1 FROM pg_publication WHERE starts_with(pubname, 'sluice_x_')`);
  return { slots: slots.length, publications: publications.length };
}

const noLeftovers = (url: string, what: string) =>
  waitFor(
    async () => {
      const left = await leftovers(url);
      return left.slots === 0 && left.publications === 0;
    },
    { timeoutMs: 20_000, what },
  );

describe('app-server: replication transfers', () => {
  it('snapshot-only completes and drops its slot; follow is refused for a source that cannot follow; follow streams until terminated', {
    timeout: 120_000,
  }, async () => {
    const url = await database(400);
    await using node = await startNode('c1', url);

    const refused = await call(`${node.url}/v1/transfers`, {
      json: {
        ...transfer('no-follow'),
        source: { type: 'postgres', connection: 'db', table: 'items' },
        options: { follow: true },
      },
    });
    expect(refused.status).toBe(400);
    expect(refused.body.code).toBe('VALIDATION_FAILED');
    expect(refused.body.errors.map((e: { path: string }) => e.path)).toEqual(['options.follow']);

    expect((await call(`${node.url}/v1/transfers`, { json: transfer('snap') })).status).toBe(201);
    const done = await waitForState(node.url, 'snap', 'COMPLETED');
    expect(done.result).toMatchObject({ recordsRead: 400, recordsWritten: 400 });
    expect(await mirrored(url)).toBe(true);
    await noLeftovers(url, 'the snapshot transfer’s slot and publication dropped after COMPLETED');

    await sql(url, 'TRUNCATE dst_writes');
    await sql(url, 'TRUNCATE dst');
    expect(
      (await call(`${node.url}/v1/transfers`, { json: transfer('follow', { follow: true }) })).status,
    ).toBe(201);
    await waitFor(
      async () => (await call(`${node.url}/v1/transfers/follow`)).body.progress?.phase === 'streaming',
      { timeoutMs: 30_000, what: 'phase streaming' },
    );
    expect(await leftovers(url)).toEqual({ slots: 1, publications: 1 });
    // `slots list` tells a transfer's slot (whichever node created it) from an orphaned endpoint's.
    await using list = spawnTs(BIN, [
      'slots',
      'list',
      '--json',
      '--config',
      join(dir.path, 'c1', 'sluice.yaml'),
    ]);
    expect((await list.exited).code).toBe(0);
    const out = list.output();
    const listed = JSON.parse(out.slice(out.indexOf('{'), out.lastIndexOf('}') + 1)).slots as Array<{
      use: string;
      endpoint: string | null;
    }>;
    expect(listed.map((s) => [s.use, s.endpoint])).toEqual([['transfer', null]]);
    await sql(url, 'INSERT INTO items SELECT i, 1 FROM generate_series(401, 450) i');
    await sql(url, 'UPDATE items SET v = v + 10 WHERE id <= 30');
    await sql(url, 'DELETE FROM items WHERE id BETWEEN 31 AND 40');
    const [written] = await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn');
    await waitFor(() => mirrored(url), { timeoutMs: 30_000, what: 'the changes mirrored' });
    // The progress names the slot and the LSN the destination committed, which passes the writes' position.
    const reached = await waitFor(
      async () => {
        const view = (await call(`${node.url}/v1/transfers/follow`)).body;
        const lsn = view.progress?.replication?.committedLsn as string | null | undefined;
        if (!lsn) return null;
        const [{ ok }] = (await sql(url, 'SELECT $1::pg_lsn >= $2::pg_lsn AS ok', [lsn, written!.lsn])) as [
          { ok: boolean },
        ];
        return ok ? view : null;
      },
      { timeoutMs: 20_000, what: 'the committed LSN past the writes' },
    );
    expect(reached.state).toBe('IN_PROGRESS');
    expect(reached.progress.replication).toMatchObject({
      slot: expect.stringMatching(/^sluice_x_follow_source/),
      lagBytes: expect.any(Number),
    });

    const terminated = await call(`${node.url}/v1/transfers/follow/terminate`, { method: 'POST' });
    expect(terminated.status).toBe(200);
    expect(terminated.body.state).toBe('TERMINATED');
    await noLeftovers(url, 'the follow transfer’s slot and publication dropped after TERMINATED');
    // Terminated: later changes are not applied.
    await sql(url, 'UPDATE items SET v = -1 WHERE id = 1');
    await new Promise((r) => setTimeout(r, 500));
    expect(await sql(url, 'SELECT v FROM dst WHERE id = 1')).toEqual([{ v: 10 }]);
  });

  it('PostgreSQL (the source) restarted mid-stream: the follow transfer is resumed, not failed, and catches up', {
    timeout: 120_000,
  }, async () => {
    const url = await database(100);
    // The destination lives elsewhere (the machine's server): only the source restarts.
    await using warehouse = await createTestDatabase('sluice_app_cdc_dst');
    await sql(warehouse.url, 'CREATE TABLE dst (id int PRIMARY KEY, v int NOT NULL)');
    await using node = await startNodeProcess({
      nodeId: 'r1',
      dir: join(dir.path, 'r1'),
      store: store.url,
      nats: nats.url,
      roots: [dir.path],
      extraYaml: `connections: { db: { type: postgres, url: "${url}" }, wh: { type: postgres, url: "${warehouse.url}" } }`,
    });
    const body = {
      ...transfer('restart', { follow: true }),
      destination: { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' },
    };
    expect((await call(`${node.url}/v1/transfers`, { json: body })).status).toBe(201);
    const copied = async () =>
      JSON.stringify(await rowsOf(url, 'items')) === JSON.stringify(await rowsOf(warehouse.url, 'dst'));
    await waitFor(
      async () => (await call(`${node.url}/v1/transfers/restart`)).body.progress?.phase === 'streaming',
      { timeoutMs: 30_000, what: 'phase streaming' },
    );
    await sql(url, 'UPDATE items SET v = 1 WHERE id <= 10');
    await waitFor(copied, { timeoutMs: 30_000, what: 'the first change' });
    await source.restart('fast');
    await sql(url, 'UPDATE items SET v = 2 WHERE id <= 20');
    await sql(url, 'DELETE FROM items WHERE id > 90');
    await waitFor(copied, { timeoutMs: 60_000, what: 'the changes after the restart' });
    const record = (await call(`${node.url}/v1/transfers/restart`)).body;
    expect(record.state).toBe('IN_PROGRESS');
    expect(record.attempts).toBeGreaterThanOrEqual(2);
    // The restart was a retryable failure of the run, counted in `retries`; the LSN checkpoints saved since the
    // changes were applied are progress, which sets the count back to 0.
    await waitFor(async () => (await call(`${node.url}/v1/transfers/restart`)).body.retries === 0, {
      timeoutMs: 30_000,
      what: 'retries back to 0 after progress',
    });
    const terminated = await call(`${node.url}/v1/transfers/restart/terminate`, { method: 'POST' });
    expect(terminated.body.state).toBe('TERMINATED');
    await noLeftovers(url, 'the slot dropped after TERMINATED');
  });

  it('SIGKILL of the owner mid-stream: another node takes over the same slot and applies every change exactly once', {
    timeout: 180_000,
  }, async () => {
    const url = await database(300);
    await sql(url, 'CREATE TABLE src_changes (id int NOT NULL)');
    await sql(
      url,
      `CREATE FUNCTION count_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
         INSERT INTO src_changes VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END); RETURN NULL; END $$`,
    );
    await sql(
      url,
      'CREATE TRIGGER items_counted AFTER INSERT OR UPDATE OR DELETE ON items FOR EACH ROW EXECUTE FUNCTION count_change()',
    );
    const a = await startNode('ka', url);
    await using b = await startNode('kb', url);
    let writer: SourceWriter | null = null;
    try {
      expect(
        (await call(`${a.url}/v1/transfers`, { json: transfer('takeover', { follow: true }) })).status,
      ).toBe(201);
      await waitFor(
        async () => (await call(`${a.url}/v1/transfers/takeover`)).body.progress?.phase === 'streaming',
        { timeoutMs: 30_000, what: 'phase streaming on the first owner' },
      );
      // Source transactions of several rows each, from after the snapshot on.
      const started = startSourceWriter(url, {
        transaction: ({ updates, added, removed }) => `DO $$ BEGIN
               UPDATE items SET v = v + 1 WHERE id IN (${updates.join(', ')});
               INSERT INTO items VALUES (${added}, 0);
               DELETE FROM items WHERE id = ${removed};
             END $$`,
      });
      writer = started;
      await waitFor(
        async () =>
          started.written >= 40 &&
          (await sql(url, 'SELECT 1 FROM dst_writes WHERE op = $1 LIMIT 1', ['DELETE'])).length > 0,
        {
          timeoutMs: 30_000,
          what: 'changes streamed by the first owner',
        },
      );
      await a.child.stop('SIGKILL');
      const atKill = started.written;
      const taken = await waitFor(
        async () => {
          const reply = await call(`${b.url}/v1/transfers/takeover`);
          return reply.body.owner?.nodeId === 'kb' && reply.body.progress?.phase === 'streaming'
            ? reply.body
            : null;
        },
        { timeoutMs: 60_000, what: 'the second node streaming the transfer' },
      );
      expect(taken.epoch).toBe(2);
      expect(taken.state).toBe('IN_PROGRESS');
      await waitFor(() => started.written >= atKill + 40, {
        timeoutMs: 30_000,
        what: 'changes after the takeover',
      });
      await started.stop();
      await waitFor(() => mirrored(url), { timeoutMs: 30_000, what: 'the new owner mirrored every change' });
      // One slot, shared by both owners (named from the transfer id).
      expect(await leftovers(url)).toEqual({ slots: 1, publications: 1 });
      // Exactly once: per key, one snapshot write (initial rows) plus one per source change.
      const mismatches = await perKeyWriteMismatches(url, {
        initialRows: 300,
        changes: 'src_changes',
        writes: 'dst_writes',
      });
      expect(mismatches).toEqual([]);

      const terminated = await call(`${b.url}/v1/transfers/takeover/terminate`, { method: 'POST' });
      expect(terminated.body.state).toBe('TERMINATED');
      await noLeftovers(url, 'the slot dropped after TERMINATED');
    } finally {
      await writer?.[Symbol.asyncDispose]();
      await a[Symbol.asyncDispose]();
    }
  });
});
