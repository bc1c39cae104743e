#!/usr/bin/env node
/**
 * Summarizes `node --cpu-prof` profiles as shares of the busy (non-idle) CPU time, by where the time was spent
 * (self time of each sampled function, grouped by the file or package it belongs to).
 *
 *   node scripts/profile-shares.mjs <file.cpuprofile | dir> [more …]
 *
 * Groups: lmdb, msgpackr, zod, fastify (incl. its dependencies), pino, crypto/hashing, cache query code
 * (packages/cache/src), cache other, core, api-server, pipeline, JSON (JSON.parse/stringify builtins), GC,
 * node internals, other. A directory means every .cpuprofile in it.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const GROUPS = [
  ['lmdb', (u) => /node_modules\/(\.pnpm\/)?lmdb/.test(u) && !/msgpackr/.test(u)],
  ['msgpackr', (u) => /msgpackr/.test(u)],
  ['zod', (u) => /node_modules\/.*zod/.test(u)],
  ['pino', (u) => /node_modules\/.*pino/.test(u)],
  [
    'fastify + http deps',
    (u) =>
      /node_modules\/.*(fastify|find-my-way|light-my-request|avvio|fast-json|secure-json|toad-cache|ret|content-type|process-warning|abstract-logging|rfdc)/.test(
        u,
      ),
  ],
  ['cache query code', (u) => /packages\/cache\/src\/(query|cursor|key-codec|ro-cache)/.test(u)],
  ['cache write code', (u) => /packages\/cache\/src\//.test(u)],
  ['core', (u) => /packages\/core\/src\//.test(u)],
  ['api-server', (u) => /apps\/api-server\/src\//.test(u)],
  ['pipeline', (u) => /packages\/pipeline\/src\//.test(u)],
  ['node internals', (u) => u.startsWith('node:')],
];

function groupOf(node) {
  const { url, functionName } = node.callFrame;
  if (functionName === '(idle)') return '(idle)';
  if (functionName === '(garbage collector)') return 'GC';
  if (functionName === '(program)') return '(program: native, outside JS)';
  if (!url && /^(parse|stringify|JSONParse|JSONStringify)$/.test(functionName)) return 'JSON builtins';
  if (!url && /^(digest|update|createHash|Hash)$/.test(functionName)) return 'crypto/hashing';
  if (/crypto/.test(url)) return 'crypto/hashing';
  for (const [name, test] of GROUPS) if (test(url)) return name;
  if (!url) return `native: ${functionName || '(anonymous)'}`;
  return 'other';
}

function files(args) {
  const out = [];
  for (const arg of args) {
    if (!statSync(arg).isDirectory()) {
      out.push(arg);
      continue;
    }
    for (const f of readdirSync(arg)) if (f.endsWith('.cpuprofile')) out.push(join(arg, f));
  }
  return out;
}

const totals = new Map();
let busy = 0;
for (const file of files(process.argv.slice(2))) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const deltas = profile.timeDeltas;
  profile.samples.forEach((id, i) => {
    const group = groupOf(byId.get(id));
    const us = deltas[i + 1] ?? 0;
    if (group === '(idle)') return;
    busy += us;
    totals.set(group, (totals.get(group) ?? 0) + us);
  });
}
const rows = [...totals].sort((a, b) => b[1] - a[1]);
console.log(`busy CPU time: ${(busy / 1e6).toFixed(1)} s`);
console.log('| where | share of busy CPU |');
console.log('|---|---:|');
for (const [group, us] of rows) {
  const share = (100 * us) / busy;
  if (share >= 0.5) console.log(`| ${group} | ${share.toFixed(1)} % |`);
}
