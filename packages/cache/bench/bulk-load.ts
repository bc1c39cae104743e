/**
 * A/B of a from-scratch load into a cache generation with two secondary indexes (one in key order, one random):
 * commits that write index entries (and log every record) as they go vs bulk commits whose entries are built at
 * the end and whose change log keeps only commit markers, as the endpoint pipeline loads a snapshot
 * (docs/cache-index-build.md). Each side runs in its own process (its memory is its own), alternating, and the
 * load is timed up to the end of `markSnapshottingDone` (which finishes a bulk build).
 *
 * Run: pnpm --filter @sluice/cache bench:bulk -- [records=1000000] [rounds=1]
 * Prints per run: rate, load and build time, CPU seconds, peak anonymous RSS; then bulk ÷ per-commit.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openCacheManager } from '../src/index.js';

const PER_COMMIT = 50_000; // what the endpoint pipeline's bench commits at a time
const AT = '2026-12-02T10:00:00.000Z';

interface Result {
  bulk: boolean;
  loadMs: number;
  buildMs: number;
  rate: number;
  cpuS: number;
  anonMB: number;
}

function anonKb(): number {
  const match = /RssAnon:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'));
  return match ? Number(match[1]) : 0;
}

/** One load in this process: prints `RESULT {…}`. */
async function child(records: number, bulk: boolean): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bulk-'));
  try {
    await using caches = await openCacheManager(dir);
    await using cache = await caches.create({
      endpoint: 'bulk',
      schema: {
        fields: { id: 'integer', name: 'string', category: 'string', value: 'number', at: 'string' },
        primaryKey: ['id'],
        indexes: [['category'], ['value']],
      },
    });
    const cpu = process.cpuUsage();
    const t0 = performance.now();
    let anon = 0;
    for (let start = 0; start < records; start += PER_COMMIT) {
      const ops = [];
      for (let id = start; id < Math.min(records, start + PER_COMMIT); id++)
        ops.push({
          op: 'upsert' as const,
          record: {
            id,
            name: `item-${id}`,
            category: `cat-${id % 20}`,
            value: ((id * 7919) % 100_000) / 10,
            at: AT,
          },
        });
      cache.apply(ops);
      // As the endpoint pipeline's cache sink commits a snapshot into a generation that does not serve yet.
      await cache.commit(null, bulk ? { bulk, changeLog: 'commits' } : { bulk });
      anon = Math.max(anon, anonKb());
    }
    const t1 = performance.now();
    await cache.markSnapshottingDone('bench');
    const t2 = performance.now();
    if (cache.count() !== records) throw new Error(`loaded ${cache.count()} of ${records}`);
    const used = process.cpuUsage(cpu);
    const result: Result = {
      bulk,
      loadMs: Math.round(t1 - t0),
      buildMs: Math.round(t2 - t1),
      rate: Math.round(records / ((t2 - t0) / 1000)),
      cpuS: Number(((used.user + used.system) / 1e6).toFixed(1)),
      anonMB: Math.round(Math.max(anon, anonKb()) / 1024),
    };
    process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function run(records: number, bulk: boolean): Result {
  const out = execFileSync(
    process.execPath,
    [...process.execArgv, fileURLToPath(import.meta.url), 'child', String(records), bulk ? '1' : '0'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 20 },
  );
  const line = out.split('\n').find((l) => l.startsWith('RESULT '));
  if (!line) throw new Error(`no result from the ${bulk ? 'bulk' : 'per-commit'} run:\n${out}`);
  return JSON.parse(line.slice('RESULT '.length)) as Result;
}

const fmt = (n: number) => n.toLocaleString('en-US');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

if (process.argv[2] === 'child') {
  await child(Number(process.argv[3]), process.argv[4] === '1');
} else {
  const args = process.argv.slice(2).filter((a) => a !== '--');
  const records = Number(args[0] ?? 1_000_000);
  const rounds = Number(args[1] ?? 1);
  if (!Number.isInteger(records) || records < 1 || !Number.isInteger(rounds) || rounds < 1)
    throw new Error('usage: bulk-load.ts [records] [rounds]');
  console.log(`records: ${fmt(records)}, ${PER_COMMIT}/commit, 2 indexes, node ${process.version}`);
  const ratios: number[] = [];
  for (let round = 1; round <= rounds; round++) {
    const results = [run(records, false), run(records, true)];
    for (const r of results)
      console.log(
        `round ${round} ${r.bulk ? 'bulk (deferred build)' : 'per-commit indexes  '}: ${fmt(r.rate)} rec/s (load ${fmt(r.loadMs)} ms + build ${fmt(r.buildMs)} ms), CPU ${r.cpuS} s, anon RSS ${r.anonMB} MiB`,
      );
    ratios.push(results[1]!.rate / results[0]!.rate);
  }
  console.log(`bulk ÷ per-commit (median of ${rounds}): ${median(ratios).toFixed(2)}`);
}
