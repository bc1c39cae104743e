import {
  type Backplane,
  type CheckpointPort,
  type Clock,
  type DataPlaneStore,
  type Logger,
  type OwnerIdentity,
  type PipelineProgress,
  SluiceError,
  type TransferRecord,
  type TransferRequest,
  type TransferResult,
  type TransitionInput,
} from '@sluice/core';
import type { NodeMetrics } from '../metrics.js';
import type { RequestPolicy } from './confinement.js';
import type { LocalRun } from './local-run.js';
import type { Scheduler } from './scheduler.js';

/** Runs one transfer to completion (the app wires `runTransfer` of `@sluice/pipeline` here). */
export type TransferExecutor = (
  request: TransferRequest,
  context: {
    checkpoint: CheckpointPort;
    signal: AbortSignal;
    onProgress: (progress: PipelineProgress) => void;
    /**
     * Whose effects the run's destination holds (pipeline `TransferContext.writer`). Absent: the transfer id, shared
     * by every run of a recorded transfer so a successor resumes and is fenced against them. A fire-and-forget run
     * has one of its own: its id is unrecorded, so another run may use it at the same time.
     */
    writer?: string;
  },
) => Promise<TransferResult>;

/** Timings and bounds of the protocol (the `transfers` section of the configuration). */
export interface CoordinatorLimits {
  leaseMs: number;
  heartbeatMs: number;
  ownerWaitMs: number;
  sweepIntervalMs: number;
  maxConcurrentTransfers: number;
  queueSize: number;
  fireAndForgetConcurrency: number;
  shutdownGraceMs: number;
}

/** A destination's fence taken at a new epoch, not yet committed. */
export interface DestinationFenceHold {
  commit(): Promise<void>;
  release(): Promise<void>;
}

export interface CoordinatorOptions {
  store: DataPlaneStore;
  backplane: Backplane;
  identity: OwnerIdentity;
  limits: CoordinatorLimits;
  policy: RequestPolicy;
  execute: TransferExecutor;
  /**
   * Removes what a transfer's runs kept for resuming (temp files, sink checkpoints) once its terminal state is
   * recorded — those of `writer` when given (a fire-and-forget run's own, see {@link TransferExecutor}), else the
   * transfer id's.
   */
  discard?: (request: TransferRequest, writer?: string) => Promise<void>;
  /**
   * The directory of the fire-and-forget journal (under the node's data directory, which one app-server holds at a
   * time): each run is kept there until it removed what it staged, so what a run that died with its process left
   * is removed by the next one (fire-and-forget.ts). Absent: no journal, and such leftovers stay.
   */
  fireAndForgetJournal?: string;
  /**
   * Takes the destination's fence at `epoch`, held open until `commit` or `release` (pipeline `holdTransferFence`);
   * null when the destination is fenced otherwise. A terminate of a transfer whose owner is gone holds it across
   * the store's change of owner, so the old owner cannot land a write after the record says TERMINATED.
   */
  fenceDestination?: (request: TransferRequest, epoch: number) => Promise<DestinationFenceHold | null>;
  metrics: NodeMetrics;
  logger: Logger;
  clock: Clock;
}

/**
 * What the coordinator's modules share: the options, the local runs by id, the claims in flight by id, the
 * scheduler of idempotent runs, and the heartbeat generation (see leases.ts).
 */
export interface CoordinatorState {
  readonly o: CoordinatorOptions;
  readonly runs: Map<string, LocalRun>;
  readonly claiming: Map<string, Promise<unknown>>;
  readonly scheduler: Scheduler;
  /** Increments when a heartbeat statement starts: a claim confirmed after it started is not judged by it. */
  heartbeatGeneration: number;
  closing: boolean;
  /** Whether a queued run whose lease ran low by this process's clock may start, once a heartbeat confirmed it (leases.ts `confirm`). */
  confirmLease: (run: LocalRun) => Promise<boolean>;
  /** Whether a queued run holds enough of its lease to start without a heartbeat confirming it first. */
  hasLeaseToStart: (run: LocalRun) => boolean;
}

const STORE_RETRIES = 5;

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * How a store call outlasts an outage longer than its few quick retries: it keeps trying every `intervalMs` while
 * `keepTrying()` says so, and calls `onLongOutage` once, when the quick retries have run out.
 */
export interface OutageWait {
  intervalMs: number;
  keepTrying: () => boolean;
  onLongOutage: (err: unknown) => void;
}

/**
 * Retries a store call that failed because the store was briefly unreachable; with `outage`, for as long as it
 * says, however long the store stays away.
 */
export async function retrying<T>(call: () => Promise<T>, outage?: OutageWait): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await call();
    } catch (err) {
      if (!SluiceError.hasCode(err, 'STORE_UNAVAILABLE')) throw err;
      if (attempt < STORE_RETRIES) {
        await sleep(100 * 2 ** attempt);
        continue;
      }
      if (!outage?.keepTrying()) throw err;
      if (attempt === STORE_RETRIES) outage.onLongOutage(err);
      await sleep(outage.intervalMs);
    }
  }
}

/**
 * A fenced transition, retried while the store is unreachable (with `outage`, as long as it says). A retry after
 * a lost reply finds the record already moved (ILLEGAL_TRANSITION from the target state): when the record is in
 * the target state at our epoch, that was our own write and counts as success — never as a failure of the
 * transfer.
 */
export async function transitionOnce(
  store: DataPlaneStore,
  id: string,
  epoch: number,
  input: TransitionInput,
  outage?: OutageWait,
): Promise<TransferRecord> {
  let retried = false;
  return retrying(async () => {
    try {
      return await store.transition(id, epoch, input);
    } catch (err) {
      if (SluiceError.hasCode(err, 'STORE_UNAVAILABLE')) retried = true;
      if (retried && SluiceError.hasCode(err, 'ILLEGAL_TRANSITION')) {
        const record = await store.get(id);
        if (record && record.epoch === epoch && record.state === input.to) return record;
      }
      throw err;
    }
  }, outage);
}
