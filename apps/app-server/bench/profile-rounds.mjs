#!/usr/bin/env node
/**
 * Where the node's CPU went during the new-id rounds of the PostgreSQL bench, and only then: cuts the windows the
 * bench wrote (`new-id-rounds.json`, monotonic µs — the clock of `node --cpu-prof` samples) out of the node's
 * profile and prints the busy CPU µs per request, the top functions by self time, and the inclusive share of the
 * frames named on the command line (by function name, e.g. `serve submit flush`).
 *
 *   CPU_PROF=/tmp/prof ONLY=postgres DURATION=5 ROUNDS=3 pnpm --filter @sluice/app-server bench
 *   node apps/app-server/bench/profile-rounds.mjs /tmp/prof [frame …]
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const [dir, ...frames] = process.argv.slice(2);
const windows = JSON.parse(readFileSync(join(dir, 'new-id-rounds.json'), 'utf8'));
const requests = windows.reduce((sum, w) => sum + w.requests, 0);
const inWindow = (t) => windows.some((w) => t >= w.from && t <= w.to);

const self = new Map();
const inclusive = new Map(frames.map((f) => [f, 0]));
let busy = 0;
let idle = 0;
for (const file of readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'))) {
  const profile = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  let t = profile.startTime;
  profile.samples.forEach((id, i) => {
    t += profile.timeDeltas[i] ?? 0;
    if (!inWindow(t)) return;
    const us = profile.timeDeltas[i + 1] ?? 0;
    const node = byId.get(id);
    const { functionName, url, lineNumber } = node.callFrame;
    if (functionName === '(idle)') {
      idle += us;
      return;
    }
    busy += us;
    const key = `${functionName || '(anonymous)'} ${url.replace(/^.*\/(node_modules|work)\//, '')}:${lineNumber + 1}`;
    self.set(key, (self.get(key) ?? 0) + us);
    const seen = new Set();
    for (let cur = id; cur !== undefined; cur = parent.get(cur)) {
      const name = byId.get(cur).callFrame.functionName;
      if (inclusive.has(name) && !seen.has(name)) {
        seen.add(name);
        inclusive.set(name, inclusive.get(name) + us);
      }
    }
  });
}
const pct = (us) => `${((100 * us) / busy).toFixed(1)} %`;
console.log(
  `windows: ${windows.length}, requests: ${requests}, busy ${(busy / 1e6).toFixed(2)} s, idle ${(idle / 1e6).toFixed(2)} s, busy CPU per request ${(busy / requests).toFixed(0)} µs`,
);
console.log('\n| self time | share of busy |\n|---|---:|');
for (const [key, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 45))
  console.log(`| ${key} | ${pct(us)} |`);
if (frames.length > 0) {
  console.log('\n| frame (inclusive) | share of busy | µs per request |\n|---|---:|---:|');
  for (const [name, us] of inclusive) console.log(`| ${name} | ${pct(us)} | ${(us / requests).toFixed(1)} |`);
}
