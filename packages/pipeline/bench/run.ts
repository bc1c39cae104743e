/**
 * `pnpm --filter @sluice/pipeline bench [records...]` (default: 1000000 5000000); `bench cdc` runs bench/cdc.ts.
 *
 * Records per second from a JSON Lines file into an endpoint cache with two secondary indexes (the whole
 * pipeline: read, parse, type-check, index, commit, alias switch), next to raw `lmdb` batched puts of the
 * same records and their two index entries (the limit) and PostgreSQL `COPY` into a table with the same two indexes (the peer), all in
 * this run on this machine. Each case runs in its own process; peak memory is that process's max RSS.
 * PROFILE=<dir> writes the pipeline case's CPU profile (`node --cpu-prof`) there.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createTestDatabase, tsxLoaderPath } from '@sluice/testkit';

// `bench cdc [changes] [lagSeconds]`: the change data capture bench (bench/cdc.ts) instead of the ingest one.
if (process.argv.slice(2).includes('cdc')) {
  await import('./cdc.js');
  process.exit(0);
}

const CASE = fileURLToPath(new URL('./case.ts', import.meta.url));
const sizes = process.argv
  .slice(2)
  .map(Number)
  .filter((n) => n > 0);
const RECORD_COUNTS = sizes.length > 0 ? sizes : [1_000_000, 5_000_000];
const CATEGORIES = Array.from({ length: 20 }, (_, i) => `cat-${i}`);

async function writeFiles(jsonl: string, csv: string, n: number) {
  const a = createWriteStream(jsonl);
  const b = createWriteStream(csv);
  let ja: string[] = [];
  let cb: string[] = [];
  const at = '2026-12-02T10:00:00.000Z';
  for (let i = 0; i < n; i++) {
    const category = CATEGORIES[i % CATEGORIES.length]!;
    const value = ((i * 7919) % 100_000) / 10;
    ja.push(`{"id":${i},"name":"item-${i}","category":"${category}","value":${value},"at":"${at}"}\n`);
    cb.push(`${i},item-${i},${category},${value},${at}\n`);
    if (ja.length === 20_000) {
      const okA = a.write(ja.join(''));
      const okB = b.write(cb.join(''));
      ja = [];
      cb = [];
      // Listen before awaiting either: one stream may drain while we wait for the other.
      const drains: Array<Promise<unknown>> = [];
      if (!okA) drains.push(once(a, 'drain'));
      if (!okB) drains.push(once(b, 'drain'));
      await Promise.all(drains);
    }
  }
  a.end(ja.join(''));
  b.end(cb.join(''));
  await Promise.all([
    new Promise<void>((r) => a.once('finish', () => r())),
    new Promise<void>((r) => b.once('finish', () => r())),
  ]);
}

interface CaseResult {
  ms: number;
  maxRssMB: number | null;
  anonPeakMB: number | null;
}

function runCase(args: string[]): Promise<CaseResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        ...(process.env.PROFILE && args[0] === 'pipeline'
          ? ['--cpu-prof', `--cpu-prof-dir=${process.env.PROFILE}`]
          : []),
        '--conditions=@sluice/source',
        '--import',
        tsxLoaderPath(),
        CASE,
        ...args,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    child.on('exit', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('RESULT '));
      if (code === 0 && line) resolve(JSON.parse(line.slice(7)));
      else reject(new Error(`case ${args[0]} failed (${code}): ${out}`));
    });
  });
}

const rate = (n: number, ms: number) => Math.round((n * 1000) / ms);
const fmt = (n: number) => n.toLocaleString('en-US');

const root = await mkdtemp('/tmp/sluice-pipeline-bench-');
await chmod(root, 0o755); // PostgreSQL's server process reads the CSV for COPY
await using db = await createTestDatabase('sluice_pipeline_bench');
// Interrupted runs clean up too (the data files are large).
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => {
    void Promise.allSettled([rm(root, { recursive: true, force: true }), db.drop()]).then(() =>
      process.exit(130),
    );
  });
console.log(
  `machine: ${cpus().length} cores (${cpus()[0]?.model}), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
);
const rows: string[] = [];
try {
  for (const n of RECORD_COUNTS) {
    const dir = join(root, String(n));
    await mkdir(dir, { recursive: true });
    await chmod(dir, 0o755);
    const jsonl = join(dir, 'items.jsonl');
    const csv = join(dir, 'items.csv');
    await writeFiles(jsonl, csv, n);
    await chmod(csv, 0o644);
    const size = (await stat(jsonl)).size;
    console.log(`\n${fmt(n)} records, ${(size / 2 ** 20).toFixed(0)} MiB of JSON Lines`);
    const pipeline = await runCase(['pipeline', jsonl, String(n), dir]);
    await rm(join(dir, 'pipeline'), { recursive: true, force: true });
    const lmdb = await runCase(['lmdb', jsonl, String(n), dir]);
    await rm(join(dir, 'raw-lmdb'), { recursive: true, force: true });
    const copy = await runCase(['pgcopy', jsonl, String(n), dir, db.url, csv]);
    // The last column is this case's records/s divided by the pipeline's.
    const line = (name: string, r: CaseResult) =>
      `| ${fmt(n)} | ${name} | ${fmt(rate(n, r.ms))} | ${(r.ms / 1000).toFixed(1)} s | ${r.maxRssMB ?? 'n/a (server)'} | ${r.anonPeakMB ?? 'n/a (server)'} | ${(pipeline.ms / r.ms).toFixed(2)} |`;
    const result = [
      line('pipeline → cache (2 indexes)', pipeline),
      line('raw lmdb batched puts, records + 2 index entries (limit)', lmdb),
      line('PostgreSQL COPY, 2 indexes (peer)', copy),
    ];
    // Progress as plain lines; the table comes once at the end.
    for (const [name, r] of [
      ['pipeline → cache', pipeline],
      ['raw lmdb', lmdb],
      ['PostgreSQL COPY', copy],
    ] as const)
      console.log(`  ${name}: ${fmt(rate(n, r.ms))} records/s in ${(r.ms / 1000).toFixed(1)} s`);
    rows.push(...result);
    await rm(dir, { recursive: true, force: true });
  }
} finally {
  await rm(root, { recursive: true, force: true });
}
console.log(
  '\n| records | case | records/s | time | max RSS incl. mapped LMDB pages (MiB) | peak anonymous RSS (MiB) | rate vs pipeline |',
);
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
