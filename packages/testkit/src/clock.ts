import type { Clock } from '@sluice/core';

/** Where a {@link ManualClock} starts unless told: a fixed instant, so timestamps in tests are exact. */
export const MANUAL_CLOCK_START = Date.parse('2026-06-01T12:00:00.000Z');

/**
 * A core `Clock` the test moves by hand, so lease expiry and timeouts are exact and instant: time passes only
 * when the test calls `advance` or `set`.
 *
 * @example
 * ```ts
 * const clock = new ManualClock();
 * const store = await openStore(url, { clock });
 * clock.advance(LEASE_MS + 1); // the lease is now expired, without waiting
 * ```
 */
export class ManualClock implements Clock {
  #ms: number;

  constructor(start: number | Date = MANUAL_CLOCK_START) {
    this.#ms = typeof start === 'number' ? start : start.getTime();
  }

  now(): Date {
    return new Date(this.#ms);
  }

  /** Lets `ms` pass. */
  advance(ms: number): void {
    this.#ms += ms;
  }

  /** Jumps to `at` (backwards too, to test a clock that steps back). */
  set(at: number | Date): void {
    this.#ms = typeof at === 'number' ? at : at.getTime();
  }
}
