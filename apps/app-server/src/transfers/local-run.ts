import {
  InternalError,
  type PipelineProgress,
  type Registration,
  type TransferRequest,
  TransferTerminatedError,
} from '@sluice/core';

/**
 * The lifecycle of one transfer run on this node (docs/coordinator.md):
 *
 * ```text
 * claiming ──claimed──▶ queued ──started──▶ running ──finishing──▶ finishing ──settled──▶ settled
 *    │                    │                                              │                ▲
 *    │                    │                                   store-unreachable           │
 *    │                    │                                              ▼                │
 *    │                    │                                        awaiting-store ──settled┤
 *    └──claim-failed──────┴──────────────(stopped while nothing runs)───────────────────────┘
 * ```
 *
 * `claiming`: the responder answers for the id but the store has not confirmed the claim (epoch unknown).
 * `queued`: owned at `epoch`, waiting for a slot. `running`: the pipeline executes. `finishing`: the run is
 * recording its outcome (no more stops apply). `awaiting-store`: the outcome is decided and the work has stopped,
 * but the store stayed unreachable longer than the quick retries; the run keeps it until the store takes it (or
 * refuses it), still this node's — its responder answers, so it is neither an orphan to resume here nor a
 * transfer another node may take over on a "nobody". `settled`: nothing of it remains on this node.
 */
export const RunPhase = {
  claiming: 'claiming',
  queued: 'queued',
  running: 'running',
  finishing: 'finishing',
  awaitingStore: 'awaiting-store',
  settled: 'settled',
} as const;
export type RunPhase = (typeof RunPhase)[keyof typeof RunPhase];

/** Why a run stops before it finishes by itself. */
export const StopReason = {
  /** A client terminated the transfer: record TERMINATED. */
  terminate: 'terminate',
  /** The store no longer lets this epoch own it (another node took over). */
  fenced: 'fenced',
  /** Graceful shutdown: release the lease so another node takes over at once. */
  handback: 'handback',
  /** The lease ran out by this process's monotonic clock (frozen, or the store unreachable). */
  leaseLost: 'lease-lost',
} as const;
export type StopReason = (typeof StopReason)[keyof typeof StopReason];

export type RunAction =
  | { type: 'claimed'; epoch: number; claimStartedAt: number; leaseMs: number; heartbeatGeneration: number }
  | { type: 'claim-failed' }
  | { type: 'started'; request: TransferRequest }
  | { type: 'finishing' }
  | { type: 'store-unreachable' }
  | { type: 'settled' };

const NEXT: Record<RunAction['type'], { from: readonly RunPhase[]; to: RunPhase }> = {
  claimed: { from: [RunPhase.claiming], to: RunPhase.queued },
  'claim-failed': { from: [RunPhase.claiming], to: RunPhase.settled },
  started: { from: [RunPhase.queued], to: RunPhase.running },
  finishing: { from: [RunPhase.queued, RunPhase.running], to: RunPhase.finishing },
  'store-unreachable': { from: [RunPhase.finishing], to: RunPhase.awaitingStore },
  settled: {
    from: [RunPhase.claiming, RunPhase.queued, RunPhase.running, RunPhase.finishing, RunPhase.awaitingStore],
    to: RunPhase.settled,
  },
};

/**
 * One local run of a transfer. Its phase changes only through {@link LocalRun.dispatch} (one place, one
 * table), and a stop request is recorded once: whoever owns the current phase reacts to it.
 */
export class LocalRun {
  readonly id: string;
  readonly hash: string;
  #phase: RunPhase = RunPhase.claiming;
  /** The store epoch this run owns; 0 while claiming. */
  epoch = 0;
  /** The heartbeat generation current when the claim was confirmed (older heartbeats say nothing of it). */
  claimedInHeartbeat = 0;
  /** Monotonic time (performance.now) past which the store may have given the transfer to another node. */
  leaseDeadline = Number.POSITIVE_INFINITY;
  stopReason: StopReason | null = null;
  progress: PipelineProgress | null = null;
  /** The request, once the run started executing (what `discard` needs). */
  request: TransferRequest | null = null;
  /** The request with its paths confined, when the submit that claimed it had confined it (else null). */
  readonly runnable: TransferRequest | null;
  registration: Registration | null = null;
  /**
   * Monotonic time (performance.now) from which this run's responder is registered on the backplane: a peer can
   * ask about the epoch this run claims only later, so while the backplane stayed reachable since then
   * (`Backplane.reachableSince`) no peer heard "nobody" for it. Null until then.
   */
  answeringSince: number | null = null;
  /** Takes the run out of the scheduler's queue while it waits there (its place freed at once); set once scheduled. */
  withdraw: (() => boolean) | null = null;
  readonly controller = new AbortController();
  readonly done: Promise<void>;
  #markDone!: () => void;
  /** Resolves once the run settled, or once it waits for the store to record its outcome (`awaiting-store`). */
  readonly stoppedWorking: Promise<void>;
  #markStoppedWorking!: () => void;

  constructor(id: string, hash: string, runnable: TransferRequest | null = null) {
    this.id = id;
    this.hash = hash;
    this.runnable = runnable;
    this.done = new Promise<void>((resolve) => {
      this.#markDone = resolve;
    });
    this.stoppedWorking = new Promise<void>((resolve) => {
      this.#markStoppedWorking = resolve;
    });
  }

  get phase(): RunPhase {
    return this.#phase;
  }

  /** True while the run may still write as the owner (claimed, not stopping, not finishing). */
  get active(): boolean {
    return this.stopReason === null && (this.#phase === RunPhase.queued || this.#phase === RunPhase.running);
  }

  /**
   * The one place a run's phase changes. An illegal action is a bug of the coordinator: it throws. Settle
   * through the coordinator (it closes the responder first, so `done` means nobody answers for this run).
   */
  dispatch(action: RunAction): void {
    const rule = NEXT[action.type];
    if (!rule.from.includes(this.#phase))
      throw new InternalError(
        `transfer run ${this.id}: ${action.type} is not allowed in phase ${this.#phase}`,
      );
    switch (action.type) {
      case 'claimed':
        this.epoch = action.epoch;
        this.claimedInHeartbeat = action.heartbeatGeneration;
        this.leaseDeadline = action.claimStartedAt + action.leaseMs;
        break;
      case 'started':
        this.request = action.request;
        break;
      default:
        break;
    }
    this.#phase = rule.to;
    if (rule.to === RunPhase.settled || rule.to === RunPhase.awaitingStore) this.#markStoppedWorking();
    if (rule.to === RunPhase.settled) this.#markDone();
  }

  /**
   * Records a stop request and aborts the pipeline. Returns the phase the request found (the caller settles
   * a queued run at once; a claiming run is settled by its claim, a running one by its execution), or null
   * when the request changes nothing (already stopping, finishing or settled).
   */
  requestStop(reason: StopReason): RunPhase | null {
    if (this.stopReason !== null) return null;
    if (
      this.#phase !== RunPhase.claiming &&
      this.#phase !== RunPhase.queued &&
      this.#phase !== RunPhase.running
    )
      return null;
    this.stopReason = reason;
    this.controller.abort(new TransferTerminatedError(this.id, { details: { reason } }));
    return this.#phase;
  }
}
