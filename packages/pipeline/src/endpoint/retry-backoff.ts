import type { PipelineCheckpoint } from '@sluice/core';

/** The longest wait between two attempts, and how long a run that commits nothing must stay up to count as recovered. */
export const MAX_BACKOFF_MS = 30_000;

/**
 * The back-off of a run that is retried after it fails (an endpoint's run, its serving generation's follower): the
 * failed attempts in a row, and the wait before the next one — the first wait, doubling per failed attempt up to
 * {@link MAX_BACKOFF_MS}.
 *
 * The rule of when an outage is over (docs/operations.md, "When an outage is over"): a run counts as **recovered** — the attempts
 * start again at 1 and the wait at the first one — once it committed past the position it started from (it read
 * its source again, even only a keepalive's advance), or once it stayed up for {@link MAX_BACKOFF_MS} (a quiet
 * source with nothing to commit). Merely starting is not enough: a run that starts and fails before reading
 * anything (its replication slot read by another process) is one more failed attempt, and waits longer each time.
 *
 * @example
 * ```ts
 * const backoff = new RetryBackoff(1_000);
 * backoff.failed();       // 1 — the first failed attempt
 * backoff.waitMs();       // 1000
 * backoff.started();      // a run started again…
 * backoff.committed(from, checkpoint, 'items.source'); // …and committed past `from`: recovered
 * backoff.failed();       // 1 — a new outage starts over
 * ```
 */
export class RetryBackoff {
  #attempts = 0;
  /** When the run now under way started (epoch ms), until it fails or recovers. */
  #upSince: number | null = null;

  constructor(
    private readonly firstMs: number,
    private readonly maxMs = MAX_BACKOFF_MS,
  ) {}

  /** Failed attempts in a row (0: none since the last recovery). */
  get attempts(): number {
    return this.#attempts;
  }

  /**
   * Failed attempts in a row that the run under way has not recovered from yet: {@link attempts}, or 0 once it stayed
   * up {@link MAX_BACKOFF_MS} (the ceiling) — while it has not, it is still the attempt after those failures.
   */
  unrecovered(now = Date.now()): number {
    return this.#upSince !== null && now - this.#upSince >= this.maxMs ? 0 : this.#attempts;
  }

  /** A run started (adopted, or a follow began) at `now`. */
  started(now = Date.now()): void {
    this.#upSince = now;
  }

  /**
   * The run that started from `from` committed `checkpoint`: recovered when the position of source `handle` moved
   * (a commit at the position it started from — a resumed stream's `snapshot-done` — proves nothing yet).
   */
  committed(from: PipelineCheckpoint | null, checkpoint: PipelineCheckpoint, handle: string): void {
    if (this.#attempts === 0) return;
    if (canonical(from?.positions[handle]) !== canonical(checkpoint.positions[handle])) this.recovered();
  }

  /** The outage is over (or another one begins from nothing: a new generation followed). */
  recovered(): void {
    this.#attempts = 0;
    this.#upSince = null;
  }

  /** Counts a failed run or start at `now`; returns the failed attempts in a row. */
  failed(now = Date.now()): number {
    if (this.#upSince !== null && now - this.#upSince >= this.maxMs) this.#attempts = 0;
    this.#upSince = null;
    this.#attempts++;
    return this.#attempts;
  }

  /** The wait before the next attempt: the first wait, doubled per failed attempt after the first, at most the ceiling. */
  waitMs(): number {
    const doublings = Math.max(0, this.#attempts - 1);
    // 2^31 ms is far past any ceiling; stop doubling before the number grows without bound.
    return Math.min(this.firstMs * 2 ** Math.min(doublings, 31), this.maxMs);
  }
}

/** A position as text with its keys sorted: the same position read back (zod-parsed, keys reordered) compares equal. */
function canonical(value: unknown): string {
  return JSON.stringify(value ?? null, (_key, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );
}
