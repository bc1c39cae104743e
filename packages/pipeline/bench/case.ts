/**
 * One benchmark case in its own process (so its peak memory is its own). argv: <kind> <jsonl> <records> <workDir>
 * [pgUrl] [csv]. Prints `RESULT {"ms":…,"maxRssMB":…}`.
 */
import { createReadStream, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { openCacheManager } from '@sluice/cache';
import type { SluiceEvent } from '@sluice/core';
import { open } from 'lmdb';
import pg from 'pg';
import { startEndpointPipeline } from '../src/endpoint.js';

const [kind, file, recordsText, workDir, pgUrl, csvFile] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string | undefined,
  string | undefined,
];
const records = Number(recordsText);
const started = performance.now();
// Max RSS counts the LMDB map's resident file pages too (the OS can drop them at will); the anonymous RSS
// (Linux: RssAnon) is the memory the process itself holds, which backpressure must keep flat.
let anonPeakKb = 0;
const sampler = setInterval(() => {
  try {
    const match = /RssAnon:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
    if (match) anonPeakKb = Math.max(anonPeakKb, Number(match[1]));
  } catch {
    // not Linux: reported as null
  }
}, 100);
sampler.unref();

if (kind === 'pipeline') {
  // DEFER_INDEXES_FROM=<records> overrides the cache's deferIndexesFrom (to compare index-build strategies);
  // STAGED_IN_MEMORY=<changes> its stagedInMemory (to compare staging in memory with spilling to the staging area).
  await using caches = await openCacheManager(join(workDir, 'pipeline'), {
    ...(process.env.DEFER_INDEXES_FROM ? { deferIndexesFrom: Number(process.env.DEFER_INDEXES_FROM) } : {}),
    ...(process.env.STAGED_IN_MEMORY ? { stagedInMemory: Number(process.env.STAGED_IN_MEMORY) } : {}),
  });
  const events: SluiceEvent[] = [];
  const pipeline = await startEndpointPipeline(
    {
      name: 'bench',
      source: { type: 'file', path: file, format: 'jsonl' },
      primaryKey: ['id'],
      fields: { id: 'integer', name: 'string', category: 'string', value: 'number', at: 'string' },
      indexes: [['category'], ['value']],
    },
    {
      caches,
      events: { publish: async (e) => void events.push(e) },
      connections: {},
      commitEveryRecords: 50_000,
      commitEveryMs: 5_000,
    },
  );
  await pipeline.whenServing({ timeoutMs: 30 * 60_000 });
  const written = pipeline.status().progress.recordsWritten;
  await pipeline.stop();
  if (written !== records) throw new Error(`wrote ${written} of ${records}`);
} else if (kind === 'lmdb') {
  // The physical limit: the same lines parsed and put into LMDB in batches — each record, and an entry per record
  // in each of two index databases ((category, id) and (value, id), holding the record's text like the cache's
  // covering entries), with lmdb's own key encoding and no checks.
  const root = open({ path: join(workDir, 'raw-lmdb'), compression: false });
  const db = root.openDB({ name: 'data' });
  const byCategory = root.openDB<string, [string, number]>({ name: 'category', encoding: 'string' });
  const byValue = root.openDB<string, [number, number]>({ name: 'value', encoding: 'string' });
  let batch: Array<{ row: { id: number; category: string; value: number }; line: string }> = [];
  const flush = async () => {
    const rows = batch;
    batch = [];
    await root.transaction(() => {
      for (const { row, line } of rows) {
        db.put(row.id, row);
        byCategory.put([row.category, row.id], line);
        byValue.put([row.value, row.id], line);
      }
    });
  };
  const lines = createInterface({ input: createReadStream(file), crlfDelay: Number.POSITIVE_INFINITY });
  for await (const line of lines) {
    batch.push({ row: JSON.parse(line), line });
    if (batch.length === 50_000) await flush();
  }
  await flush();
  await root.close();
} else if (kind === 'pgcopy') {
  // The peer: PostgreSQL COPY (server-side read of the same records as CSV) into a table with the same two indexes.
  const client = new pg.Client({ connectionString: pgUrl });
  await client.connect();
  await client.query('DROP TABLE IF EXISTS bench_items');
  await client.query(
    'CREATE TABLE bench_items (id bigint PRIMARY KEY, name text, category text, value double precision, at text)',
  );
  await client.query('CREATE INDEX ON bench_items (category)');
  await client.query('CREATE INDEX ON bench_items (value)');
  const t0 = performance.now();
  await client.query(`COPY bench_items FROM '${csvFile}' WITH (FORMAT csv)`);
  const ms = performance.now() - t0;
  const count = (await client.query('SELECT count(*)::int AS n FROM bench_items')).rows[0].n;
  await client.query('DROP TABLE bench_items');
  await client.end();
  if (count !== records) throw new Error(`copied ${count} of ${records}`);
  process.stdout.write(`RESULT ${JSON.stringify({ ms, maxRssMB: null, anonPeakMB: null })}\n`);
  process.exit(0);
}
const ms = performance.now() - started;
process.stdout.write(
  `RESULT ${JSON.stringify({
    ms,
    maxRssMB: Math.round(process.resourceUsage().maxRSS / 1024),
    anonPeakMB: anonPeakKb > 0 ? Math.round(anonPeakKb / 1024) : null,
  })}\n`,
);
process.exit(0);
