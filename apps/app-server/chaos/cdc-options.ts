/** The CDC chaos run's knobs (`chaos:cdc`); its randomness is the transfer run's seeded {@link Rng}. */
import { nonNegativeInteger, parseFlags } from './flags.js';
import { randomSeed } from './options.js';

export interface CdcChaosOptions {
  /** How long faults are injected (at least one fault of each kind is injected, however short). */
  seconds: number;
  seed: number;
  /** Rows of `accounts` (the row count every response must show; big transactions touch all of them). */
  rows: number;
  /** Keep the run's directory (configuration, LMDB files, logs) even when nothing was violated. */
  keep: boolean;
  /** Progress lines on stderr. */
  verbose: boolean;
  /**
   * Faults on independent seeded lanes that may overlap, with the combined kinds (cdc-overlap.ts); off: one at a
   * time, each healed before the next.
   */
  overlap: boolean;
}

export const CDC_DEFAULTS: CdcChaosOptions = {
  seconds: 120,
  seed: 0,
  rows: 2_000,
  keep: false,
  verbose: true,
  overlap: true,
};

/** Parses `--seconds N --seed N --rows N --keep --quiet --overlap --no-overlap`; throws on anything else. */
export function parseCdcArgs(argv: string[]): CdcChaosOptions {
  const options = { ...CDC_DEFAULTS, seed: randomSeed() };
  parseFlags(argv, {
    '--seconds': (value) => {
      options.seconds = nonNegativeInteger('--seconds', value());
    },
    '--seed': (value) => {
      options.seed = nonNegativeInteger('--seed', value());
    },
    '--rows': (value) => {
      options.rows = Math.max(2, nonNegativeInteger('--rows', value()));
    },
    '--keep': () => {
      options.keep = true;
    },
    '--quiet': () => {
      options.verbose = false;
    },
    '--overlap': () => {
      options.overlap = true;
    },
    '--no-overlap': () => {
      options.overlap = false;
    },
  });
  // Big transactions split the rows into two equal halves (one gains what the other loses).
  if (options.rows % 2 === 1) options.rows += 1;
  return options;
}
