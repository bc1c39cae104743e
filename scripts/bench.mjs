#!/usr/bin/env node
// Runs every package's benchmark (`pnpm --filter <pkg> bench`) one after another — never in parallel, so
// they do not steal cores from each other — and writes BENCHMARKS.md with each one's tables, the command
// and the machine it ran on.
//
//   pnpm bench               the report profile: sizes chosen so the whole run takes a few minutes on 2 cores
//   pnpm bench --full        each package's own defaults (the figures in the package READMEs; ~20 min)
//   pnpm bench cache store   only the packages whose name contains one of the words
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const argv = process.argv.slice(2).filter((arg) => arg !== '--');
const full = argv.includes('--full');
const only = argv.filter((arg) => arg !== '--full');

/**
 * The report profile: smaller sizes and shorter load runs than each package's defaults, so `pnpm bench`
 * finishes in a few minutes. Every ratio is still measured against its limit and peer in the same run.
 */
const REPORT_PROFILE = {
  '@sluice/store': { args: ['--sqlite-ops', '10000', '--pg-ops', '2000'] },
  '@sluice/pipeline': { args: ['200000'] },
  '@sluice/app-server': { env: { DURATION: '3', ROUNDS: '2' } },
  '@sluice/api-server': { env: { RECORDS: '50000', DURATION: '3', ROUNDS: '2' } },
};

function allPackagesWithBench() {
  const found = [];
  for (const group of ['packages', 'apps']) {
    for (const dir of readdirSync(join(root, group))) {
      const file = join(root, group, dir, 'package.json');
      if (!existsSync(file)) continue;
      const pkg = JSON.parse(readFileSync(file, 'utf8'));
      if (pkg.scripts?.bench && existsSync(join(root, group, dir, 'bench')))
        found.push({ name: pkg.name, dir: `${group}/${dir}` });
    }
  }
  return found;
}

function packagesWithBench() {
  return allPackagesWithBench().filter((p) => only.length === 0 || only.some((o) => p.name.includes(o)));
}

/** The command line a user can run to get the same figures for one package. */
function commandFor(pkg) {
  const profile = full ? {} : (REPORT_PROFILE[pkg.name] ?? {});
  const env = Object.entries(profile.env ?? {}).map(([k, v]) => `${k}=${v} `);
  const args = profile.args?.length ? ` -- ${profile.args.join(' ')}` : '';
  return { profile, text: `${env.join('')}pnpm --filter ${pkg.name} bench${args}` };
}

function run(pkg) {
  return new Promise((resolve) => {
    const started = Date.now();
    const { profile, text } = commandFor(pkg);
    const child = spawn(
      'pnpm',
      ['--filter', pkg.name, 'bench', ...(profile.args ? ['--', ...profile.args] : [])],
      {
        cwd: root,
        env: { ...process.env, ...profile.env },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
      process.stdout.write(chunk);
    });
    child.stderr.on('data', (chunk) => process.stderr.write(chunk));
    child.on('exit', (code) =>
      resolve({ ...pkg, command: text, code, out, seconds: (Date.now() - started) / 1000 }),
    );
  });
}

function bodyOf(output) {
  // Drop pnpm's banner lines ("> @sluice/x@0.1.0 bench ..."), keep what the benchmark printed.
  return output
    .split('\n')
    .filter((line) => !/^> /.test(line))
    .join('\n')
    .trim();
}

const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, Node ${process.version}, ${process.platform}/${process.arch}`;
const results = [];
for (const pkg of packagesWithBench()) {
  process.stdout.write(`\n==> ${pkg.name}: ${commandFor(pkg).text}\n`);
  results.push(await run(pkg));
}

const fresh = new Map(
  results.map((r) => [
    r.name,
    [
      `## ${r.name}`,
      '',
      `Command: \`${r.command}\` — ${r.code === 0 ? `finished in ${r.seconds.toFixed(0)} s` : `FAILED (exit ${r.code})`}`,
      '',
      bodyOf(r.out),
      '',
    ].join('\n'),
  ]),
);

/** Sections of the existing report, by package, so that `pnpm bench cache` replaces only the cache's. */
function previousSections() {
  const file = join(root, 'BENCHMARKS.md');
  if (only.length === 0 || !existsSync(file)) return new Map();
  const parts = readFileSync(file, 'utf8')
    .split(/^(?=## @sluice\/)/m)
    .slice(1);
  return new Map(
    parts.map((part) => [part.slice(3, part.indexOf('\n')).trim(), part.trimEnd().concat('\n')]),
  );
}

const sections = previousSections();
for (const [name, section] of fresh) sections.set(name, section);
const order = allPackagesWithBench().map((p) => p.name);
const ordered = [...sections].sort(([a], [b]) => order.indexOf(a) - order.indexOf(b)).map(([, text]) => text);
const totalSeconds = ordered
  .map((text) => Number(/finished in (\d+) s/.exec(text)?.[1] ?? 0))
  .reduce((a, b) => a + b, 0);
writeFileSync(
  join(root, 'BENCHMARKS.md'),
  [
    '# Benchmarks',
    '',
    only.length === 0
      ? `Generated by \`pnpm bench\` on ${new Date().toISOString()}.`
      : `Generated by \`pnpm bench\`; ${[...fresh.keys()].join(', ')} re-run on ${new Date().toISOString()} (\`pnpm bench ${only.join(' ')}\`).`,
    '',
    `Machine: ${machine}.`,
    '',
    full
      ? "Profile: `pnpm bench --full` (each package's default sizes)."
      : `Profile: the report profile of \`pnpm bench\` (sized for a few minutes on 2 cores; \`pnpm bench --full\` runs each package's default sizes, as recorded in the package READMEs). Total ${totalSeconds} s.`,
    '',
    'Each benchmark measures Sluice next to the physical limit (the raw library underneath) and a peer a user',
    'would pick instead, in the same run, and prints the ratios.',
    '',
    ...ordered,
  ].join('\n'),
);
const failed = results.filter((r) => r.code !== 0);
console.log(`\nWrote BENCHMARKS.md (${results.length} benchmarks, ${failed.length} failed)`);
process.exit(failed.length === 0 ? 0 : 1);
