/**
 * The chaos run of the data plane in a size CI can afford (see chaos/driver.ts; by hand:
 * `pnpm --filter @sluice/app-server chaos`): 3 nodes on PostgreSQL + NATS, idempotent transfers to file,
 * PostgreSQL and JetStream destinations under pauses, kills, restarts and nats-server restarts. The seed is printed
 * (and can be pinned with SLUICE_CHAOS_SEED) so a failure can be replayed by hand with `--seed`.
 */
import { describe, expect, it } from 'vitest';
import { runChaos } from '../chaos/driver.js';
import { DEFAULTS, randomSeed } from '../chaos/options.js';
import { formatSummary } from '../chaos/report.js';

const seed = process.env.SLUICE_CHAOS_SEED ? Number(process.env.SLUICE_CHAOS_SEED) : randomSeed();

describe('chaos (bounded)', () => {
  it(`every transfer ends final, exactly once, terminated ones stop (seed ${seed})`, {
    timeout: 300_000,
  }, async () => {
    const summary = await runChaos({
      ...DEFAULTS,
      transfers: 30,
      seconds: 40,
      settleSeconds: 60,
      seed,
      verbose: false,
    });
    const report = formatSummary(summary, 25);
    console.log(report);
    // The run must have exercised something, or zero violations proves nothing.
    expect(summary.counts.pauses + summary.counts.kills + summary.counts.gracefulStops).toBeGreaterThan(0);
    expect(Object.values(summary.states).reduce((a, b) => a + b, 0)).toBe(30);
    expect(summary.violations, report).toEqual([]);
  });
});
