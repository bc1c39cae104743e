/**
 * `pnpm --filter @sluice/app-server chaos:cdc [--seconds S] [--seed N]`: the CDC chaos run by hand. Prints the seed
 * first (rerun with `--seed` to replay the same schedule), progress on stderr, then the counts and every violation
 * with its evidence; exits 1 when anything was violated.
 */
import { runCdcChaos } from './cdc-driver.js';
import { parseCdcArgs } from './cdc-options.js';
import { formatCdcSummary } from './cdc-report.js';

const options = parseCdcArgs(process.argv.slice(2));
console.log(`cdc chaos seed ${options.seed} (replay: --seed ${options.seed})`);
const summary = await runCdcChaos(
  options,
  options.verbose ? (line) => process.stderr.write(`${line}\n`) : undefined,
);
console.log(formatCdcSummary(summary));
process.exit(summary.violations.length > 0 ? 1 : 0);
