/**
 * A small seeded pseudo-random generator (mulberry32) for randomized tests: a failing case is replayed from the
 * seed it printed.
 *
 * @example
 * ```ts
 * const rng = seededRandom(42);
 * rng.int(1, 6); // the same sequence for seed 42 on every run
 * ```
 */
export function seededRandom(seed: number) {
  let s = seed >>> 0;
  /** A number in [0, 1). */
  const next = (): number => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    /** An integer in [lo, hi]. */
    int: (lo: number, hi: number): number => lo + Math.floor(next() * (hi - lo + 1)),
    /** One of `items` (not empty). */
    pick: <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!,
    /** True with probability `p`. */
    chance: (p: number): boolean => next() < p,
  };
}

/** What {@link seededRandom} returns. */
export type SeededRandom = ReturnType<typeof seededRandom>;
