/**
 * A fire-and-forget run writes as a writer of its own (`fire-and-forget.<uuid>`) and is in no store: when its
 * app-server is killed mid-run, nothing resumes it and — before the fix — nothing ever removed what it staged (a file
 * sink's temp file, a PostgreSQL sink's `sluice_sink_checkpoints` row). Over months of crashes a destination
 * directory filled with orphaned temp files and the checkpoint table grew. The clean-up may never touch what a run
 * still alive uses: here another node shares the store, the destination directory (the very same destination file)
 * and the destination database, and its runs go on while the killed node restarts.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { createTestDatabase, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  exactlyOnce,
  fileTransfer,
  localNode,
  type NodeSpec,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

const RECORDS = 2_000;
/** 2 000 records at 50 a second: every run is still going when the killed node has restarted and cleaned up. */
const RATE = 50;

/** The temp files staged in `directory` (a file sink's `….partial`), sorted. */
async function stagedFiles(directory: string): Promise<string[]> {
  return (await readdir(directory).catch(() => [] as string[])).filter((n) => n.endsWith('.partial')).sort();
}

/** The writers of the sink checkpoint rows in the destination database, sorted. */
async function checkpointWriters(url: string): Promise<string[]> {
  const rows = await sql<{ writer: string }>(
    url,
    'SELECT writer FROM sluice_sink_checkpoints ORDER BY writer',
  );
  return rows.map((r) => r.writer);
}

/** What appeared in `after` that was not in `before` (exactly one name, or the test is off). */
function added(before: string[], after: string[]): string {
  const fresh = after.filter((name) => !before.includes(name));
  if (fresh.length !== 1) throw new Error(`expected one new name, got ${JSON.stringify(fresh)}`);
  return fresh[0]!;
}

describe('what a killed fire-and-forget run leaves behind', { timeout: 180_000 }, () => {
  it('defect: a fire-and-forget run killed with its app-server left its temp file and its sink checkpoint row for good', async () => {
    await using db = await createTestDatabase('sluice_ff_leftovers');
    await using dir = await tempDir('sluice-ff-leftovers-');
    await sql(db.url, 'CREATE TABLE dst (id integer PRIMARY KEY, value double precision, category text)');
    await sql(db.url, 'CREATE TABLE rec (id integer PRIMARY KEY, value double precision, category text)');
    const source = await writeRecords(join(dir.path, 'in', 'records.jsonl'), RECORDS);
    const out = join(dir.path, 'out');
    const shared = join(out, 'shared.jsonl');
    const spec = (nodeId: string): NodeSpec => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: db.url,
      roots: [dir.path],
      extraYaml: `connections: { wh: { type: postgres, url: "${db.url}" } }`,
    });
    const toPostgres = (id: string, mode: string, table: string) => ({
      id,
      mode,
      source: { type: 'file', path: source, format: 'jsonl' },
      destination: { type: 'postgres', connection: 'wh', table, key: 'id' },
      properties: {},
      options: { maxRecordsPerSecond: RATE },
    });
    await using live = await startNodeProcess(spec('live'));
    const victimSpec = spec('victim');
    const victim = await startNodeProcess(victimSpec);
    let restarted: Awaited<ReturnType<typeof startNodeProcess>> | null = null;
    try {
      // The live node: a recorded and a fire-and-forget run into the shared directory (the fire-and-forget one into
      // the very file the victim's run writes), the same into the shared database.
      expect(
        (
          await call(`${live.url}/v1/transfers`, {
            json: fileTransfer('rec-file', source, join(out, 'rec.jsonl'), RATE),
          })
        ).status,
      ).toBe(201);
      expect(
        (
          await call(`${live.url}/v1/transfers`, {
            json: { ...fileTransfer('ff-file', source, shared, RATE), mode: 'fire-and-forget' },
          })
        ).status,
      ).toBe(202);
      expect(
        (await call(`${live.url}/v1/transfers`, { json: toPostgres('rec-pg', 'idempotent', 'rec') })).status,
      ).toBe(201);
      // One PostgreSQL run after the other: two sinks creating the sink tables of a fresh database at the same moment
      // collide in PostgreSQL's catalog (noticed here, not this test's subject).
      await waitFor(async () => (await checkpointWriters(db.url).catch(() => [])).length === 1, {
        timeoutMs: 30_000,
        what: "the live node's recorded PostgreSQL run to commit a checkpoint",
      });
      expect(
        (await call(`${live.url}/v1/transfers`, { json: toPostgres('ff-pg', 'fire-and-forget', 'dst') }))
          .status,
      ).toBe(202);
      const liveTemps = await waitFor(
        async () => ((await stagedFiles(out)).length === 2 ? stagedFiles(out) : null),
        {
          timeoutMs: 30_000,
          what: "the live node's file runs to stage their temp files",
        },
      );
      const liveRows = await waitFor(
        async () => {
          const writers = await checkpointWriters(db.url);
          return writers.length === 2 ? writers : null;
        },
        { timeoutMs: 30_000, what: "the live node's fire-and-forget PostgreSQL run to commit a checkpoint" },
      );

      // The victim: the same two fire-and-forget requests (same ids, same destinations), killed mid-run.
      expect(
        (
          await call(`${victim.url}/v1/transfers`, {
            json: { ...fileTransfer('ff-file', source, shared, RATE), mode: 'fire-and-forget' },
          })
        ).status,
      ).toBe(202);
      expect(
        (await call(`${victim.url}/v1/transfers`, { json: toPostgres('ff-pg', 'fire-and-forget', 'dst') }))
          .status,
      ).toBe(202);
      const victimTemp = added(
        liveTemps,
        await waitFor(async () => ((await stagedFiles(out)).length === 3 ? stagedFiles(out) : null), {
          timeoutMs: 20_000,
          what: "the victim's run to stage its temp file",
        }),
      );
      const victimRow = added(
        liveRows,
        await waitFor(
          async () => {
            const writers = await checkpointWriters(db.url);
            return writers.length === 3 ? writers : null;
          },
          { timeoutMs: 20_000, what: "the victim's PostgreSQL run to commit a checkpoint" },
        ),
      );
      expect(victimRow).toMatch(/^fire-and-forget\..+:ff-pg\.sink$/);
      await victim.child.stop('SIGKILL');

      // Restarted on its own data directory: what its dead runs staged goes, and nothing of the live node's runs.
      restarted = await startNodeProcess(victimSpec);
      await waitFor(
        async () =>
          !(await stagedFiles(out)).includes(victimTemp) &&
          !(await checkpointWriters(db.url)).includes(victimRow),
        {
          timeoutMs: 20_000,
          what: "the killed run's temp file and checkpoint row to be removed after the restart",
        },
      );
      expect(await stagedFiles(out)).toEqual(liveTemps);
      expect(await checkpointWriters(db.url)).toEqual(liveRows);
      expect((await call(`${live.url}/v1/transfers/rec-file`)).body.state).toBe('IN_PROGRESS');
      expect((await call(`${live.url}/v1/transfers/rec-pg`)).body.state).toBe('IN_PROGRESS');
      expect(restarted.child.output()).toMatch(/removed what a fire-and-forget run of a previous life left/);

      // The live node's runs were untouched: each ends with every record once, and leaves nothing behind.
      const recFile = await waitForState(live.url, 'rec-file', 'COMPLETED', 90_000);
      expect(recFile.result).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
      expect(await exactlyOnce(join(out, 'rec.jsonl'), RECORDS)).toBeNull();
      const recPg = await waitForState(live.url, 'rec-pg', 'COMPLETED', 90_000);
      expect(recPg.result).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
      await waitFor(async () => (await exactlyOnce(shared, RECORDS).catch(() => 'absent')) === null, {
        timeoutMs: 90_000,
        what: "the live node's fire-and-forget run to publish its whole copy",
      });
      await waitFor(
        async () => (await stagedFiles(out)).length === 0 && (await checkpointWriters(db.url)).length === 0,
        { timeoutMs: 90_000, what: 'every run to end and remove what it staged' },
      );
      expect(await sql<{ n: number }>(db.url, 'SELECT count(*)::int AS n FROM dst')).toEqual([
        { n: RECORDS },
      ]);
      expect(live.child.output()).not.toContain('fire-and-forget transfer did not complete');
    } finally {
      await victim.child.stop('SIGKILL');
      await restarted?.[Symbol.asyncDispose]();
    }
  });

  it('a paused app-server keeps its fire-and-forget run: no new process on its data directory sweeps it, and it publishes once it wakes', async () => {
    await using dir = await tempDir('sluice-ff-paused-');
    const source = await writeRecords(join(dir.path, 'in', 'records.jsonl'), 300);
    const out = join(dir.path, 'out');
    const destination = join(out, 'copy.jsonl');
    const spec = localNode('paused', dir.path);
    await using paused = await startNodeProcess(spec);
    const fired = await call(`${paused.url}/v1/transfers`, {
      json: { ...fileTransfer('ff', source, destination, 100), mode: 'fire-and-forget' },
    });
    expect(fired.status).toBe(202);
    const [staged] = await waitFor(
      async () => ((await stagedFiles(out)).length === 1 ? stagedFiles(out) : null),
      {
        timeoutMs: 20_000,
        what: 'the run to stage its temp file',
      },
    );
    paused.child.kill('SIGSTOP');
    try {
      // The data directory is still held (its process lives): a new process there — which would sweep the journal —
      // is refused before it reads anything.
      const second = await startNodeProcess({ ...spec, port: paused.port }).then(
        async (node) => {
          await node[Symbol.asyncDispose]();
          return 'started';
        },
        (err: Error) => err.message,
      );
      expect(second).toMatch(/Another app-server \(pid \d+\) is using the data directory/);
      expect(await stagedFiles(out)).toEqual([staged]);
    } finally {
      paused.child.kill('SIGCONT');
    }
    await waitFor(async () => (await exactlyOnce(destination, 300).catch(() => 'absent')) === null, {
      timeoutMs: 30_000,
      what: 'the woken run to publish its whole copy',
    });
    await waitFor(async () => (await stagedFiles(out)).length === 0, {
      timeoutMs: 10_000,
      what: 'nothing staged left',
    });
    expect(paused.child.output()).not.toContain('fire-and-forget transfer did not complete');
  });
});
