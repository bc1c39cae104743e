import type { CoordinatorState } from './context.js';
import { stopRun } from './execution.js';
import { type LocalRun, RunPhase, StopReason } from './local-run.js';

/**
 * Heartbeats in a row that may fail to extend a run about to start (the store unreachable) before it gives the run
 * up. Heartbeats that do extend it never count: the store still lets this instance own it.
 */
const CONFIRM_ATTEMPTS = 3;

/**
 * Leases of the runs this node owns: one heartbeat statement extends them all — skipping, not waiting for, a
 * row another session holds — and names what the store no longer lets this instance own (those runs are fenced); a frequent watchdog stops any running run whose lease
 * ran out by this process's monotonic clock (the store unreachable, or the process frozen), before it writes
 * again. A queued run has nothing to stop: it is confirmed by a heartbeat when it starts ({@link confirm}).
 */
export class LeaseKeeper {
  readonly #state: CoordinatorState;
  readonly #resumeOrphans: (ids: string[]) => Promise<void>;
  /** The heartbeat in flight: a second caller joins it instead of sending another statement. */
  #beat: Promise<void> | null = null;

  constructor(state: CoordinatorState, resumeOrphans: (ids: string[]) => Promise<void>) {
    this.#state = state;
    this.#resumeOrphans = resumeOrphans;
  }

  heartbeat(): Promise<void> {
    if (this.#state.closing) return Promise.resolve();
    this.#beat ??= this.#heartbeatOnce().finally(() => {
      this.#beat = null;
    });
    return this.#beat;
  }

  async #heartbeatOnce(): Promise<void> {
    const state = this.#state;
    // A claim confirmed from here on may not be in this statement's result yet: it is not judged by it.
    const generation = ++state.heartbeatGeneration;
    const startedMono = performance.now();
    try {
      const { store, identity, limits } = state.o;
      const outcome = await store.heartbeat(identity, limits.leaseMs);
      const extended = new Set(outcome.extended);
      const held = new Set(outcome.held);
      for (const run of state.runs.values()) {
        if (!run.active || run.claimedInHeartbeat >= generation) continue;
        if (extended.has(run.id)) run.leaseDeadline = startedMono + limits.leaseMs;
        // Held by another session: still ours as the statement began, but not extended — the run keeps its
        // deadline (the watchdog stops it if the lease runs out) and the next heartbeat judges it again.
        else if (!held.has(run.id)) stopRun(state, run, StopReason.fenced);
      }
      const orphans = outcome.extended.filter((id) => !state.runs.has(id) && !state.claiming.has(id));
      if (orphans.length > 0) await this.#resumeOrphans(orphans);
      await store.touchNode(identity.nodeId);
    } catch (err) {
      state.o.logger.warn({ err }, 'heartbeat failed');
    }
  }

  /**
   * Whether a queued run whose lease ran low by this process's clock may start: true once a heartbeat that
   * began after its claim extended it with at least half a lease left (the store still lets this instance own
   * it, for a lease from that heartbeat's start); false when the run was stopped meanwhile (a heartbeat found it
   * fenced, a shutdown) or {@link CONFIRM_ATTEMPTS} heartbeats in a row could not extend it (the store
   * unreachable).
   *
   * A heartbeat that extends the run with less than half a lease left (a round trip over half a lease: an
   * overloaded process or store) says the store still lets this instance own it, so the run keeps waiting for the
   * next one instead of being given up. Giving it up after a few such heartbeats, with its lease fresh in the
   * store, made it an orphan that this node (or a peer, told over the backplane that nobody runs it) claimed again
   * at epoch + 1: a second attempt of a transfer whose owner was alive and held its lease — seen as `attempts` 2
   * in the 100-concurrent-submits test under load (`test/slow-owner.test.ts`).
   *
   * Why not stop it as the watchdog does a running run: a queued run has written nothing and runs nothing, so
   * there is nothing to stop in time. Stopping it only made it an orphan that the next heartbeat extended and
   * this node took over again (epoch + 1, claimed and queued anew) — under a backlog whose heartbeat took longer
   * than the lease, a churn through every queued transfer (BENCHMARKS.md § Issue 15, session 8).
   */
  async confirm(run: LocalRun): Promise<boolean> {
    let unextended = 0;
    while (unextended < CONFIRM_ATTEMPTS) {
      if (!run.active || this.#state.closing) return false;
      if (this.hasLeaseToStart(run)) return true;
      const deadline = run.leaseDeadline;
      await this.heartbeat();
      // Extended (the deadline moved): the store still lets this instance own it, however slow the round trip.
      unextended = run.leaseDeadline > deadline ? 0 : unextended + 1;
    }
    return run.active && !this.#state.closing && this.hasLeaseToStart(run);
  }

  /**
   * Whether a queued run may start on the lease it holds: at least half of it left by this process's clock.
   * With less, the watchdog would stop the run moments after it started unless a heartbeat came first — and
   * when heartbeats are late (the reason so little is left), it stops it as running: a run begun, fenced and
   * taken over again by this very node at epoch + 1. A heartbeat confirms it instead ({@link confirm}).
   * Heartbeats come every `heartbeatMs` (well under half a lease), so a healthy node never waits here.
   */
  hasLeaseToStart(run: LocalRun): boolean {
    return performance.now() <= run.leaseDeadline - this.#state.o.limits.leaseMs / 2;
  }

  watch(): void {
    const now = performance.now();
    for (const run of this.#state.runs.values()) {
      if (run.active && run.phase === RunPhase.running && now > run.leaseDeadline)
        stopRun(this.#state, run, StopReason.leaseLost);
    }
  }
}
