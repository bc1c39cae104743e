/**
 * `pnpm --filter @sluice/app-server chaos [--transfers 200] [--seconds 120] [--seed S]`: the chaos run by hand.
 * Prints the seed first (rerun with `--seed` to replay the same schedule of faults and requests), progress on
 * stderr, then the counts and every violation with its evidence; exits 1 when anything was violated.
 */
import { runChaos } from './driver.js';
import { parseArgs } from './options.js';
import { formatSummary } from './report.js';

const options = parseArgs(process.argv.slice(2));
console.log(`chaos seed ${options.seed} (replay: --seed ${options.seed})`);
const summary = await runChaos(
  options,
  options.verbose ? (line) => process.stderr.write(`${line}\n`) : undefined,
);
console.log(formatSummary(summary));
process.exit(summary.violations.length > 0 ? 1 : 0);
