import { formatLsn, parseLsn } from './lsn.js';

/** How far the endpoint is behind the source: WAL bytes and seconds. */
export interface ReplicationLag {
  bytes: number;
  seconds: number;
}

/** Samples kept at most (one per probe): older ones are merged into the oldest kept. */
const MAX_SAMPLES = 10_000;

/**
 * Replication lag as an operator means it: how far what the cache committed is behind PostgreSQL's own WAL
 * position, in bytes and in seconds — also while nothing arrives (a stalled walsender, a slow network), which the
 * stream alone cannot see. PostgreSQL's current WAL position is sampled (`observeServer`); a sample is caught up
 * once the cache committed past it, or once the stream read past it with nothing of ours left uncommitted
 * (other tables' WAL has nothing to apply). Seconds: the age of the oldest sample not caught up, or of the oldest
 * received transaction not yet committed, whichever is older — like `pg_stat_replication.replay_lag`.
 */
export class LagTracker {
  private samples: Array<{ lsn: bigint; at: number }> = [];
  private head = 0;
  private committed: bigint | null = null;
  private caughtUp = 0n;
  private latest = 0n;
  private received: bigint | null = null;
  private unappliedSince: number | null = null;
  private observed: number | null = null;

  /** PostgreSQL's current WAL position, sampled at `at`. */
  observeServer(lsn: string, at = Date.now()): void {
    if (this.observed === null || at > this.observed) this.observed = at;
    const value = parseLsn(lsn);
    if (value > this.latest) this.latest = value;
    if (value <= this.caughtUp) return;
    const last = this.samples[this.samples.length - 1];
    if (last !== undefined && last.lsn >= value) return;
    this.samples.push({ lsn: value, at });
    if (this.samples.length - this.head > MAX_SAMPLES) this.samples.splice(this.head + 1, 1);
  }

  /** The stream delivered everything up to `lsn` (a keepalive, or a transaction's end). */
  observeReceived(lsn: string): void {
    const value = parseLsn(lsn);
    if (this.received === null || value > this.received) this.received = value;
    if (value > this.latest) this.latest = value;
  }

  /** A transaction of ours began arriving at `at` (it is unapplied until committed). */
  beginTransaction(at = Date.now()): void {
    this.unappliedSince ??= at;
  }

  /** The stream read past `lsn` with every change of ours before it committed: nothing there to apply. */
  readPast(lsn: string): void {
    this.advance(parseLsn(lsn));
  }

  /** The cache committed everything up to `lsn`. */
  commit(lsn: string): void {
    const value = parseLsn(lsn);
    if (this.committed === null || value > this.committed) this.committed = value;
    if (this.received === null || value >= this.received) this.unappliedSince = null;
    this.advance(value);
  }

  /** When PostgreSQL's WAL position was last sampled (ms since the epoch), or null before the first sample. */
  observedAt(): number | null {
    return this.observed;
  }

  /** The committed position (PostgreSQL's spelling), or null before the first commit. */
  committedLsn(): string | null {
    return this.committed === null ? null : formatLsn(this.committed);
  }

  /**
   * How far a position that stopped advancing at `since` (ms) is behind PostgreSQL's WAL now: a generation that no
   * longer follows the slot (the serving one while a rebuild feeds another).
   */
  behind(lsn: string, since: number, now = Date.now()): ReplicationLag {
    const value = parseLsn(lsn);
    const bytes = this.latest > value ? Number(this.latest - value) : 0;
    return { bytes, seconds: bytes > 0 ? Math.max(0, now - since) / 1000 : 0 };
  }

  /** The lag now, or null before the first commit. */
  lag(now = Date.now()): ReplicationLag | null {
    if (this.committed === null) return null;
    const bytes = this.latest > this.caughtUp ? Number(this.latest - this.caughtUp) : 0;
    const oldest = this.samples[this.head];
    const since = Math.min(oldest?.at ?? now, this.unappliedSince ?? now);
    return { bytes, seconds: Math.max(0, now - since) / 1000 };
  }

  private advance(value: bigint): void {
    if (value > this.caughtUp) this.caughtUp = value;
    while (this.head < this.samples.length && this.samples[this.head]!.lsn <= this.caughtUp) this.head++;
    if (this.head > 1024) {
      this.samples.splice(0, this.head);
      this.head = 0;
    }
  }
}
