/**
 * Memory of a big source transaction over logical replication: the endpoint runs in a child process whose V8 heap is
 * capped well below what staging the whole transaction as JavaScript objects takes, and one `INSERT … SELECT` far
 * bigger than that cap is mirrored. The child must survive and the mirror end with every row; a SIGKILL in the
 * middle of staging, then a restart, must leave nothing half-applied.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openCacheManager, type RoCache } from '@sluice/cache';
import { type ChildHandle, spawnTs, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIG_TRANSACTION_ENDPOINT, bigTransactionItems } from '../../test/big-transaction.js';
import { cacheRows, tableRows, useLogicalPostgres } from '../../test/replication.js';

const CHILD = fileURLToPath(new URL('../../test/fixtures/replication-child.ts', import.meta.url));
/** The child's V8 heap cap: an idle endpoint pipeline needs well under half of it. */
const HEAP_MB = 96;
const ROWS = 200_000;

const server = useLogicalPostgres();

/**
 * A field of the child's /proc status in MB (`VmHWM`: peak resident set; `RssAnon`: resident memory of its own, not
 * pages of mapped files such as LMDB's), or null once it has exited.
 */
function procStatusMb(pid: number, field: 'VmHWM' | 'RssAnon'): number | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = new RegExp(`${field}:\\s+(\\d+) kB`).exec(status);
    return match ? Math.round(Number(match[1]) / 1024) : null;
  } catch {
    return null;
  }
}

function startChild(root: string, url: string): ChildHandle {
  return spawnTs(CHILD, [JSON.stringify({ root, url, endpoint: BIG_TRANSACTION_ENDPOINT, nodeId: 't1' })], {
    nodeArgs: [`--max-old-space-size=${HEAP_MB}`],
  });
}

/** How many records the endpoint serves (-1 before it has a generation). */
async function servedCount(root: string): Promise<number> {
  await using reader = await openCacheManager(root, { readOnly: true });
  if (reader.resolveAlias('items') === null) return -1;
  const cache = await reader.openRo('items');
  try {
    return cache.count({});
  } finally {
    await cache.close();
  }
}

/** The served rows' count and a checksum of their values, read as an api-server would. */
async function mirror(root: string): Promise<{ count: number; sum: number; names: number }> {
  await using reader = await openCacheManager(root, { readOnly: true });
  if (reader.resolveAlias('items') === null) return { count: -1, sum: 0, names: 0 };
  const cache = await reader.openRo('items');
  try {
    let sum = 0;
    let names = 0;
    let count = 0;
    eachRecord(cache, (record) => {
      count++;
      sum += Number(record.id) * 7 + Number(record.v);
      names += String(record.name).length;
    });
    return { count, sum, names };
  } finally {
    await cache.close();
  }
}

/** Every record `cache` serves, in key order, a page of 1 000 at a time as an api-server's client would read them. */
function eachRecord(cache: RoCache, visit: (record: Record<string, unknown>) => void): void {
  let after: string | null = null;
  do {
    const page: { records: Record<string, unknown>[]; next: string | null } = cache.query({
      limit: 1_000,
      after,
    });
    for (const record of page.records) visit(record);
    after = page.next;
  } while (after !== null);
}

async function tableChecksum(url: string): Promise<{ count: number; sum: number; names: number }> {
  const [row] = await sql<{ count: string; sum: string; names: string }>(
    url,
    'SELECT count(*) AS count, sum(id::bigint * 7 + v) AS sum, sum(length(name)) AS names FROM items',
  );
  return { count: Number(row!.count), sum: Number(row!.sum), names: Number(row!.names) };
}

/** Waits until the mirror serves `count` records, failing at once if the child exits meanwhile. */
async function waitForCount(child: ChildHandle, root: string, count: number): Promise<void> {
  let watching = true;
  const died = child.exited.then((info) => {
    if (watching)
      throw new Error(
        `the endpoint child exited (${info.code ?? info.signal}) before mirroring ${count} rows:\n${child.lines.slice(-25).join('\n')}`,
      );
  });
  try {
    await Promise.race([
      died,
      waitFor(async () => (await servedCount(root)) === count, {
        timeoutMs: 150_000,
        intervalMs: 500,
        what: `${count} mirrored rows`,
      }),
    ]);
  } finally {
    watching = false;
  }
}

/** Bytes of the LMDB file of the generation the alias points at (it grows as a writer stages to disk). */
async function generationFileBytes(root: string): Promise<number> {
  await using reader = await openCacheManager(root, { readOnly: true });
  const target = reader.resolveAlias('items');
  return target === null ? 0 : statSync(join(root, 'caches', target.cache, 'data.mdb')).size;
}

describe('memory of a big source transaction', () => {
  it(`defect: a ${ROWS}-row source transaction is staged in memory whole, so an app-server whose heap is capped at ${HEAP_MB} MB runs out of memory`, {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    const url = await bigTransactionItems(server, 'bigmem');
    await using child = startChild(root, url);
    await child.waitForLine(/^SERVING /, 60_000);
    const idle = procStatusMb(child.pid, 'VmHWM');
    const idleAnon = procStatusMb(child.pid, 'RssAnon');

    await sql(
      url,
      `INSERT INTO items SELECT i, i % 10, 'name-' || i || repeat('x', i % 7) FROM generate_series(1001, ${1000 + ROWS}) i`,
    );
    let peak = idle;
    let peakAnon = idleAnon;
    const watch = setInterval(() => {
      peak = Math.max(peak ?? 0, procStatusMb(child.pid, 'VmHWM') ?? 0);
      peakAnon = Math.max(peakAnon ?? 0, procStatusMb(child.pid, 'RssAnon') ?? 0);
    }, 100);
    try {
      await waitForCount(child, root, 100 + ROWS);
    } finally {
      clearInterval(watch);
    }
    console.log(
      `[big transaction memory] ${ROWS} rows, heap cap ${HEAP_MB} MB: child peak RSS ${idle} MB idle → ${peak} MB; anonymous RSS ${idleAnon} MB idle → at most ${peakAnon} MB (sampled every 100 ms)`,
    );
    expect(await mirror(root)).toEqual(await tableChecksum(url));
    // The child lives on, and keeps mirroring.
    await sql(url, "UPDATE items SET name = 'after' WHERE id = 1");
    await waitFor(async () => (await mirror(root)).names === (await tableChecksum(url)).names, {
      timeoutMs: 30_000,
      what: 'the next transaction mirrored',
    });
    expect(child.child.exitCode).toBeNull();
  });

  it('SIGKILLed while a big transaction is staged, then restarted: nothing half-applied, and the mirror ends equal to the table', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    const url = await bigTransactionItems(server, 'bigkill');
    {
      await using child = startChild(root, url);
      await child.waitForLine(/^SERVING /, 60_000);
      // An update of every committed row and new rows, in one transaction: a half-applied one would show either.
      await sql(
        url,
        `BEGIN; UPDATE items SET v = v + 100; INSERT INTO items SELECT i, i % 10, 'k' || i FROM generate_series(1001, ${1000 + ROWS}) i; COMMIT`,
      );
      // Killed once the child has staged part of it on disk (the generation's file grew by several spills), long
      // before it could have read all of it.
      const idle = await generationFileBytes(root);
      await waitFor(async () => (await generationFileBytes(root)) > idle + 4 * 1024 * 1024, {
        timeoutMs: 60_000,
        intervalMs: 20,
        what: 'the child staging the transaction on disk',
      });
      child.kill('SIGKILL');
      await child.exited;
      // Nothing of the transaction is served: the rows before it, unchanged.
      expect(await mirror(root)).toEqual({
        count: 100,
        sum: Array.from({ length: 100 }, (_, i) => (i + 1) * 7 + ((i + 1) % 10)).reduce((a, b) => a + b),
        names: Array.from({ length: 100 }, (_, i) => `n${i + 1}`.length).reduce((a, b) => a + b),
      });
    }
    await using again = startChild(root, url);
    await again.waitForLine(/^SERVING /, 60_000);
    await waitForCount(again, root, 100 + ROWS);
    expect(await mirror(root)).toEqual(await tableChecksum(url));
    const table = await tableRows(url, 'items');
    const served = await (async () => {
      await using reader = await openCacheManager(root, { readOnly: true });
      const cache = await reader.openRo('items');
      try {
        const records: Record<string, unknown>[] = [];
        eachRecord(cache, (record) => records.push(record));
        return cacheRows(records);
      } finally {
        await cache.close();
      }
    })();
    expect(served.size).toBe(table.size);
    for (const [id, row] of table) if (served.get(id) !== row) expect(served.get(id)).toBe(row);
  });
});
