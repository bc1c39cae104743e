/**
 * Wakes the requests waiting for an endpoint to commit further (`sluice-min-position`). The app-server commits in
 * another process and LMDB has no cross-process notification, so something must look: one check every `everyMs`
 * while anyone waits — per awaited alias, its serving generation's commit state (`servingState`: a byte
 * comparison with the last commit seen, decoded only when it changed) — instead of every waiting request
 * re-reading and decoding the commit state on a timer of its own (5 ms: 2.5 ms of added latency on average, and
 * under load each of many waiters paying a decode per poll).
 */
import type { CommitState, ReadableCache } from '@sluice/core';

/** What a waiter last saw of an alias: the generation answering it and that generation's commit state. */
export interface SeenCommit {
  cache: ReadableCache;
  state: Readonly<CommitState>;
}

interface Waiter {
  alias: string;
  seen: SeenCommit;
  deadline: number;
  wake: () => void;
}

/**
 * One shared poll for every min-position waiter of one api-server.
 *
 * @example
 * ```ts
 * const signal = new CommitSignal((alias) => registry.current(alias)?.cache ?? null);
 * const state = lease.cache.servingState();
 * if (!reached(state)) await signal.next('items', { cache: lease.cache, state }, remainingMs);
 * ```
 */
export class CommitSignal {
  private readonly waiters = new Set<Waiter>();
  private timer: NodeJS.Timeout | null = null;

  /**
   * @param serving the generation currently answering an alias (no lease: only its commit state is read), or null
   * @param everyMs how often to look while anyone waits
   */
  constructor(
    private readonly serving: (alias: string) => ReadableCache | null,
    private readonly everyMs = 1,
  ) {}

  /**
   * Resolves once `alias` is answered by another generation or its generation committed past `seen.state` (the
   * state the caller last checked: nothing committed in between is missed), or once `timeoutMs` passed.
   */
  next(alias: string, seen: SeenCommit, timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      this.waiters.add({ alias, seen, deadline: Date.now() + timeoutMs, wake: resolve });
      if (this.timer === null) {
        this.timer = setInterval(() => this.check(), this.everyMs);
        this.timer.unref();
      }
    });
  }

  /** Waiters right now (tests, metrics). */
  get waiting(): number {
    return this.waiters.size;
  }

  private check(): void {
    const now = Date.now();
    // One look per alias per tick, however many wait on it.
    const states = new Map<string, SeenCommit | null>();
    for (const waiter of this.waiters) {
      let current = states.get(waiter.alias);
      if (current === undefined) {
        current = this.look(waiter.alias);
        states.set(waiter.alias, current);
      }
      const moved =
        current === null || current.cache !== waiter.seen.cache || current.state !== waiter.seen.state;
      if (moved || now >= waiter.deadline) {
        this.waiters.delete(waiter);
        waiter.wake();
      }
    }
    if (this.waiters.size === 0 && this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  private look(alias: string): SeenCommit | null {
    const cache = this.serving(alias);
    if (cache === null) return null;
    try {
      return { cache, state: cache.servingState() };
    } catch {
      // A generation closing under us: let the waiter look for itself (it re-acquires the alias).
      return null;
    }
  }

  /** Wakes every waiter (the server is closing). */
  close(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    for (const waiter of this.waiters) waiter.wake();
    this.waiters.clear();
  }
}
