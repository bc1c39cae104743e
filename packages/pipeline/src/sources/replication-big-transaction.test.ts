/**
 * Big source transactions over logical replication: one `INSERT … SELECT generate_series(…)` of hundreds of thousands
 * of rows, mirrored in one cache commit, while PostgreSQL's `wal_sender_timeout` is short (2 s) — so a process that
 * stops answering the walsender for longer than that loses its replication connection.
 */
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { openCacheManager } from '@sluice/cache';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIG_TRANSACTION_ENDPOINT, bigTransactionItems } from '../../test/big-transaction.js';
import { replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';

const SLOT = 'sluice_t1_items_source';

const server = useLogicalPostgres({ settings: { wal_sender_timeout: '2s' } });

async function start(root: string, url: string) {
  // The change log keeps every change of the test's transactions (the default keeps 100 000 past the newest one).
  const caches = await openCacheManager(root, { changes: { retainRecords: 5_000_000, retainMs: 3_600_000 } });
  const pipeline = await startEndpointPipeline(BIG_TRANSACTION_ENDPOINT, replicationContext(caches, url));
  return {
    caches,
    pipeline,
    async [Symbol.asyncDispose]() {
      await pipeline.stop();
      await caches.close();
    },
  };
}

/**
 * A database `database` with the 100 rows of `items`, mirrored into `root` and streaming: its URL, the walsender
 * streaming the slot, and where the server's log stood (what the test looks at for a replication timeout).
 */
async function startStreaming(root: string, database: string) {
  const url = await bigTransactionItems(server, database);
  const started = await start(root, url);
  try {
    await started.pipeline.whenServing({ timeoutMs: 30_000 });
    const walsender = await waitFor(() => walsenderOf(url), { what: 'the slot streamed' });
    const logBefore = (await server.handle.log()).length;
    return { ...started, url, walsender, logBefore };
  } catch (err) {
    await started[Symbol.asyncDispose]();
    throw err;
  }
}

/** The backend streaming the slot (null while nobody does). */
async function walsenderOf(url: string): Promise<number | null> {
  const rows = await sql<{ pid: number | null }>(
    url,
    'SELECT active_pid AS pid FROM pg_replication_slots WHERE slot_name = $1',
    [SLOT],
  );
  return rows[0]?.pid ?? null;
}

/** Samples the served record count (as an api-server's reader would) until stopped: every distinct count seen. */
function sampleCounts(root: string) {
  const seen = new Set<number>();
  let sampling = true;
  const done = (async () => {
    await using reader = await openCacheManager(root, { readOnly: true });
    const cache = await reader.openRo('items');
    try {
      while (sampling) {
        seen.add(cache.count({}));
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    } finally {
      await cache.close();
    }
  })();
  return {
    seen,
    async stop() {
      sampling = false;
      await done;
      return [...seen].sort((a, b) => a - b);
    },
  };
}

describe('replication of big source transactions', () => {
  it('defect: a transaction whose cache commit outlasts wal_sender_timeout drops the replication connection (PostgreSQL terminates the walsender for replication timeout)', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    await using started = await startStreaming(root, 'bigtx');
    const { url, walsender, logBefore } = started;

    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    const sampler = sampleCounts(root);
    const rows = 150_000;
    await sql(
      url,
      `INSERT INTO items SELECT i, i % 10, 'n' || i FROM generate_series(1001, ${1000 + rows}) i`,
    );
    await waitFor(() => sampler.seen.has(100 + rows), {
      timeoutMs: 120_000,
      what: 'the big transaction to appear',
    });
    // One more transaction behind it: mirrored through the same connection, or through a new one if it was lost.
    await sql(url, "INSERT INTO items VALUES (0, 0, 'after')");
    await waitFor(() => sampler.seen.has(101 + rows), { timeoutMs: 60_000, what: 'the next transaction' });
    const counts = await sampler.stop();
    delay.disable();
    console.log(
      `[big transaction] ${rows} rows: longest event-loop stall ${(delay.max / 1e6).toFixed(0)} ms; walsender ${walsender} → ${await walsenderOf(url)}`,
    );

    // Readers saw the transaction whole: the count before it, after it, and after the next one.
    expect(counts).toEqual([100, 100 + rows, 101 + rows]);
    const log = (await server.handle.log()).slice(logBefore);
    expect(log.split('\n').filter((line) => /replication timeout/.test(line))).toEqual([]);
    // The same walsender streamed it all: the connection was kept.
    expect(await walsenderOf(url)).toBe(walsender);
  });

  it('a 1 000 000-row transaction is mirrored whole: every row once, in one commit, never seen in part (peak RSS logged)', {
    timeout: 600_000,
  }, async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    await using started = await startStreaming(root, 'million');
    const { url, walsender, logBefore } = started;
    const cache = await started.caches.openRo('items');
    const logged = cache.changeLog().head().last;
    const rssBefore = process.memoryUsage().rss;

    const sampler = sampleCounts(root);
    const rows = 1_000_000;
    await sql(
      url,
      `INSERT INTO items SELECT i, i % 10, 'n' || i FROM generate_series(1001, ${1000 + rows}) i`,
    );
    await waitFor(() => sampler.seen.has(100 + rows), {
      timeoutMs: 540_000,
      intervalMs: 500,
      what: 'the big transaction to appear',
    });
    const counts = await sampler.stop();
    // Peak RSS of the whole process (the test's PostgreSQL runs in processes of its own).
    console.log(
      `[big transaction] ${rows} rows: RSS ${rssBefore >> 20} MB before, peak ${Math.round(process.resourceUsage().maxRSS / 1024)} MB; walsender ${walsender} → ${await walsenderOf(url)}`,
    );

    expect(counts).toEqual([100, 100 + rows]);
    expect(cache.count({ id: { $gte: 1001 } })).toBe(rows);
    // The change log holds the transaction as one commit: its million changes, each key once, then one marker.
    const keys = new Set<number>();
    let after = logged;
    let markersWithin = 0;
    for (;;) {
      const page = cache.changeLog().read(after, 10_000);
      if (page.length === 0) break;
      for (const entry of page) {
        if (entry.op === 'upsert') keys.add(Number(entry.key[0]));
        else if (entry.op === 'commit' && keys.size > 0 && keys.size < rows) markersWithin++;
      }
      after = page[page.length - 1]!.seq;
      if (keys.size === rows) break;
    }
    await cache.close();
    expect(keys.size).toBe(rows);
    expect(markersWithin).toBe(0);
    const log = (await server.handle.log()).slice(logBefore);
    expect(log.split('\n').filter((line) => /replication timeout/.test(line))).toEqual([]);
    expect(await walsenderOf(url)).toBe(walsender);
  });
});
