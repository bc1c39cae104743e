/**
 * Core pinning for the HTTP benchmarks. On a small machine the load generator (autocannon, in the bench process)
 * and the server under test share the cores; unpinned, the scheduler now and then runs both on one core, and the
 * server that touches more memory per request (a cache reading LMDB pages, against a route returning a prebuilt
 * object) loses its CPU caches more: the same build measured 0.36 and 0.66 of the bare route in two runs of one
 * session. Pinned, the load generator has one core and each server another, as with a separate load machine.
 * PostgreSQL's backends are left unpinned: the fastify + pg peer may use both cores, which can only favour it.
 *
 * Opt-in (`PIN=1`), for runs the server bounds: on two cores one core of autocannon cannot saturate a lookup
 * server (sluice and the bare route both measured ~14,000 lookups/s pinned against ~25,000 unpinned), so pinned
 * lookup figures measure the load generator. The range query keeps the server busy either way.
 */
import { execFileSync } from 'node:child_process';
import { availableParallelism } from 'node:os';

/** How the benchmark's processes are placed: pinned with `PIN=1` (it needs `taskset` and two cores). */
export type Placement =
  | { kind: 'pinned'; loadCores: string; serverCore: string }
  | { kind: 'unpinned'; reason: string };

/**
 * Pins this process (the load generator) to every core but the last, and each server (every thread of it) to the
 * last core.
 *
 * @example
 * ```ts
 * const placement = pinProcesses([api.pid, bare.pid]);
 * console.log(describePlacement(placement));
 * ```
 */
export function pinProcesses(serverPids: readonly number[]): Placement {
  if (process.env.PIN !== '1') return { kind: 'unpinned', reason: 'PIN=1 pins them' };
  const cores = availableParallelism();
  if (cores < 2) return { kind: 'unpinned', reason: `${cores} core` };
  const serverCore = String(cores - 1);
  const loadCores = cores === 2 ? '0' : `0-${cores - 2}`;
  try {
    execFileSync('taskset', ['-a', '-p', '-c', loadCores, String(process.pid)], { stdio: 'ignore' });
    for (const pid of serverPids)
      execFileSync('taskset', ['-a', '-p', '-c', serverCore, String(pid)], { stdio: 'ignore' });
  } catch (error) {
    return { kind: 'unpinned', reason: `taskset failed (${(error as Error).message.split('\n')[0]})` };
  }
  return { kind: 'pinned', loadCores, serverCore };
}

/** One line saying where the processes run. */
export function describePlacement(placement: Placement): string {
  return placement.kind === 'pinned'
    ? `pinned: load generator on core ${placement.loadCores}, each server on core ${placement.serverCore} (PostgreSQL unpinned)`
    : `unpinned (${placement.reason}): load generator and servers share the cores`;
}
