/** The chaos run's knobs and its seeded randomness (one seed reproduces the schedule of faults and requests). */

import { nonNegativeInteger, parseFlags } from './flags.js';

export interface ChaosOptions {
  transfers: number;
  /** How long faults are injected; submissions are spread over the first two thirds of it. */
  seconds: number;
  seed: number;
  /** Once every node is back up, how long every transfer has to reach a final state. */
  settleSeconds: number;
  /** The app-server CLI to run: `src` (TypeScript sources through tsx, as the tests do) or a path to a built `bin.js`. */
  bin: string;
  /** Keep the run's directory (sources, destinations, node logs) even when nothing was violated. */
  keep: boolean;
  /** Progress lines on stderr. */
  verbose: boolean;
  /** No faults at all (requests, resends and terminates only): the baseline that separates a race from a fault. */
  calm: boolean;
}

export const DEFAULTS: ChaosOptions = {
  transfers: 200,
  seconds: 120,
  seed: 0,
  settleSeconds: 90,
  bin: 'src',
  keep: false,
  verbose: true,
  calm: false,
};

/** Parses `--transfers N --seconds N --seed S --settle N --bin PATH --keep --quiet --calm`; throws on anything else. */
export function parseArgs(argv: string[]): ChaosOptions {
  const options = { ...DEFAULTS, seed: randomSeed() };
  parseFlags(argv, {
    '--transfers': (value) => {
      options.transfers = nonNegativeInteger('--transfers', value());
    },
    '--seconds': (value) => {
      options.seconds = nonNegativeInteger('--seconds', value());
    },
    '--seed': (value) => {
      options.seed = nonNegativeInteger('--seed', value());
    },
    '--settle': (value) => {
      options.settleSeconds = nonNegativeInteger('--settle', value());
    },
    '--bin': (value) => {
      options.bin = value() ?? 'src';
    },
    '--keep': () => {
      options.keep = true;
    },
    '--quiet': () => {
      options.verbose = false;
    },
    '--calm': () => {
      options.calm = true;
    },
  });
  return options;
}

export function randomSeed(): number {
  return Math.floor(Math.random() * 2 ** 31);
}

/** mulberry32: small, fast, and the same sequence for the same seed on every platform. */
export class Rng {
  #state: number;
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }
  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[Math.floor(this.next() * items.length)]!;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  /** A derived generator, so one concern's draws do not shift another's sequence. */
  fork(salt: number): Rng {
    return new Rng(Math.imul(this.int(0, 2 ** 31), 2654435761) ^ salt);
  }
}
