import { readdirSync, readFileSync } from 'node:fs';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { waitFor } from './wait.js';

/** What a live process holds, read from `/proc/<pid>` (Linux). */
export interface ProcessResources {
  /** Open file descriptors. */
  readonly fds: number;
  /** Lines of `/proc/<pid>/maps` naming a file whose path contains the `mapped` argument. */
  readonly mapped: number;
  /** Of those, the mappings of files already deleted (`(deleted)`): kept alive only by this process. */
  readonly mappedDeleted: number;
  /** Resident set size, kB. */
  readonly rssKb: number;
  readonly threads: number;
}

/**
 * Reads the resources process `pid` holds: a churn test samples them after every iteration and asserts they stay
 * flat (counts, not timings). `mapped` names the files whose mappings are counted (default LMDB's `data.mdb`).
 *
 * @example
 * ```ts
 * const before = processResources(child.pid);
 * // … 50 switches …
 * expect(processResources(child.pid).fds).toBeLessThanOrEqual(before.fds + 5);
 * ```
 */
export function processResources(pid: number, mapped = 'data.mdb'): ProcessResources {
  const maps = readFileSync(`/proc/${pid}/maps`, 'utf8')
    .split('\n')
    .filter((line) => line.includes(mapped));
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? Number.NaN);
  return {
    fds: readdirSync(`/proc/${pid}/fd`).length,
    mapped: maps.length,
    mappedDeleted: maps.filter((line) => line.endsWith('(deleted)')).length,
    rssKb: field('VmRSS'),
    threads: field('Threads'),
  };
}

/** The `NODE_OPTIONS` that let {@link heapObjectCounts} take heap snapshots of a child writing them into `dir`. */
export function heapSnapshotNodeOptions(dir: string): string {
  return `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${dir}`;
}

interface HeapSnapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

/**
 * Live objects per constructor name in node process `pid`, counted in a heap snapshot (taken after a full GC) that
 * it writes into `dir` on SIGUSR2 — the child must run with {@link heapSnapshotNodeOptions}`(dir)`. Only the
 * names in `names` are counted. Counts what a process retains, unlike RSS, which a GC that has not run yet inflates.
 */
export async function heapObjectCounts(
  pid: number,
  dir: string,
  names: readonly string[],
): Promise<Record<string, number>> {
  const before = new Set(await readdir(dir));
  process.kill(pid, 'SIGUSR2');
  const snapshot = await waitFor(
    async () => {
      const file = (await readdir(dir)).find((name) => !before.has(name) && name.endsWith('.heapsnapshot'));
      if (!file) return null;
      try {
        const parsed = JSON.parse(await readFile(join(dir, file), 'utf8')) as HeapSnapshot;
        // Tens of MB each: only the counts are kept.
        await rm(join(dir, file), { force: true });
        return parsed;
      } catch {
        return null; // still being written
      }
    },
    { timeoutMs: 30_000, intervalMs: 200, what: `a heap snapshot of process ${pid}` },
  );
  const fields = snapshot.snapshot.meta.node_fields;
  const types = snapshot.snapshot.meta.node_types[0];
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const counts: Record<string, number> = Object.fromEntries(names.map((name) => [name, 0]));
  for (let i = 0; i < snapshot.nodes.length; i += fields.length) {
    if (types[snapshot.nodes[i + typeAt]!] !== 'object') continue;
    const name = snapshot.strings[snapshot.nodes[i + nameAt]!]!;
    if (Object.hasOwn(counts, name)) counts[name]! += 1;
  }
  return counts;
}
