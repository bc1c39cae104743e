import type { CoordinatorState } from './context.js';
import { stopRun } from './execution.js';
import { RunPhase, StopReason } from './local-run.js';

/**
 * Leases of the runs this node owns: one heartbeat statement extends them all and names what the store no
 * longer lets this instance own (those runs are fenced); a frequent watchdog stops any run whose lease ran out
 * by this process's monotonic clock (the store unreachable, or the process frozen), before it writes again.
 */
export class LeaseKeeper {
  readonly #state: CoordinatorState;
  readonly #resumeOrphans: (ids: string[]) => Promise<void>;
  #beating = false;

  constructor(state: CoordinatorState, resumeOrphans: (ids: string[]) => Promise<void>) {
    this.#state = state;
    this.#resumeOrphans = resumeOrphans;
  }

  async heartbeat(): Promise<void> {
    const state = this.#state;
    if (this.#beating || state.closing) return;
    this.#beating = true;
    // A claim confirmed from here on may not be in this statement's result yet: it is not judged by it.
    const generation = ++state.heartbeatGeneration;
    const startedMono = performance.now();
    try {
      const { store, identity, limits } = state.o;
      const extended = new Set(await store.heartbeat(identity, limits.leaseMs));
      for (const run of state.runs.values()) {
        if (!run.active || run.claimedInHeartbeat >= generation) continue;
        if (extended.has(run.id)) run.leaseDeadline = startedMono + limits.leaseMs;
        else stopRun(state, run, StopReason.fenced);
      }
      const orphans = [...extended].filter((id) => !state.runs.has(id) && !state.claiming.has(id));
      if (orphans.length > 0) await this.#resumeOrphans(orphans);
      await store.touchNode(identity.nodeId);
    } catch (err) {
      state.o.logger.warn({ err }, 'heartbeat failed');
    } finally {
      this.#beating = false;
    }
  }

  watch(): void {
    const now = performance.now();
    for (const run of this.#state.runs.values()) {
      if (run.active && run.phase !== RunPhase.claiming && now > run.leaseDeadline)
        stopRun(this.#state, run, StopReason.leaseLost);
    }
  }
}
