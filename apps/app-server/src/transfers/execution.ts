import {
  asSluiceError,
  type CheckpointPort,
  SluiceError,
  StaleEpochError,
  type TransferRecord,
  type TransferRequest,
  type TransferResult,
  type TransferState,
  TransferTerminatedError,
} from '@sluice/core';
import { createCheckpointPort } from '@sluice/store';
import { type CoordinatorState, type OutageWait, transitionOnce } from './context.js';
import { type LocalRun, RunPhase, StopReason } from './local-run.js';
import type { Ticket } from './scheduler.js';

/**
 * Retryable failures (a peer unreachable for now) a transfer may have in a row — without saving progress in
 * between — and still be resumed; the next one records it FAILED. Owner changes (takeovers after a node died)
 * are not failures of the transfer and do not count (`TransferRecord.retries`, not `attempts`).
 */
export const MAX_RETRIES = 20;

/**
 * Running a claimed transfer and ending its local run: execution, the fenced checkpoint port, stop requests
 * and what each stop reason records in the store.
 */

/** Asks a run to stop; a queued run (nothing to interrupt) leaves the queue and is settled at once. */
export function stopRun(state: CoordinatorState, run: LocalRun, reason: StopReason): void {
  if (run.requestStop(reason) !== RunPhase.queued) return;
  run.withdraw?.();
  void settleStopped(state, run, null);
}

/** Removes the run from this node: its responder closes first, then `done` resolves. */
export async function settle(state: CoordinatorState, run: LocalRun): Promise<void> {
  if (run.phase === RunPhase.settled) return;
  if (state.runs.get(run.id) === run) state.runs.delete(run.id);
  await run.registration?.close().catch(() => {});
  if ((run.phase as RunPhase) !== RunPhase.settled) run.dispatch({ type: 'settled' });
}

/** Ends a run that was asked to stop: terminate → TERMINATED, handback → release, fenced → nothing. */
export async function settleStopped(state: CoordinatorState, run: LocalRun, err: unknown): Promise<void> {
  if (run.phase !== RunPhase.queued && run.phase !== RunPhase.running) return;
  run.dispatch({ type: 'finishing' });
  const { logger, store, metrics } = state.o;
  switch (run.stopReason) {
    case StopReason.terminate:
      if (await finish(state, run, 'TERMINATED', {})) {
        const request = run.request ?? (await store.get(run.id).catch(() => null))?.request;
        if (request) await discard(state, request);
        logger.info({ transferId: run.id, epoch: run.epoch }, 'transfer terminated');
      }
      break;
    case StopReason.handback:
      try {
        await store.release(run.id, run.epoch);
        logger.info({ transferId: run.id, epoch: run.epoch }, 'transfer handed back');
      } catch (releaseErr) {
        logger.warn({ transferId: run.id, err: releaseErr }, 'could not release the lease');
      }
      break;
    default:
      metrics.fenced.inc();
      logger.warn(
        { transferId: run.id, epoch: run.epoch, reason: run.stopReason, err },
        'stopped local work on a transfer this node no longer owns',
      );
  }
  await settle(state, run);
}

/**
 * Records the run's outcome, fenced by its epoch; false when the store refused it (logged). A store that stays
 * unreachable is waited for (the run in `awaiting-store`, every heartbeat interval) until it takes the outcome or
 * refuses it, or the node shuts down: a run that settled without its outcome left the record IN_PROGRESS and
 * owned here, and the next heartbeat resumed it as an orphan — a terminated transfer ran again to completion.
 */
export async function finish(
  state: CoordinatorState,
  run: LocalRun,
  to: TransferState,
  input: { result?: TransferResult; error?: { code: string; message: string } },
): Promise<boolean> {
  const outage: OutageWait = {
    intervalMs: state.o.limits.heartbeatMs,
    keepTrying: () => !state.closing,
    onLongOutage: (err) => {
      run.dispatch({ type: 'store-unreachable' });
      state.o.logger.warn(
        { transferId: run.id, epoch: run.epoch, err },
        `store unreachable: ${to} is recorded once it answers again`,
      );
    },
  };
  try {
    await transitionOnce(state.o.store, run.id, run.epoch, { to, ...input }, outage);
    state.o.metrics.finished.inc({ state: to });
    return true;
  } catch (err) {
    if (SluiceError.hasCode(err, 'STALE_EPOCH')) {
      state.o.metrics.fenced.inc();
      state.o.logger.warn({ transferId: run.id, epoch: run.epoch }, `fenced: could not record ${to}`);
    } else if (SluiceError.hasCode(err, 'ILLEGAL_TRANSITION')) {
      state.o.logger.info({ transferId: run.id, epoch: run.epoch }, `already final: did not record ${to}`);
    } else state.o.logger.error({ transferId: run.id, err }, `could not record ${to}`);
    return false;
  }
}

/**
 * Best effort: leftovers of a transfer that ended for good (a failure here is logged, never raised). `runnable`:
 * the request with its paths already confined, when the caller has it.
 */
export async function discard(
  state: CoordinatorState,
  request: TransferRequest,
  runnable: TransferRequest | null = null,
): Promise<void> {
  if (!state.o.discard) return;
  try {
    // No access check: the leftovers are found by path even when the source has become unreadable since.
    await state.o.discard(runnable ?? state.o.policy.confine(request, { access: false }));
  } catch (err) {
    state.o.logger.warn({ transferId: request.id, err }, 'could not remove what the transfer left behind');
  }
}

/**
 * Counts a retryable failure of the run in the store: the transfer's `retries` now, `fenced` when another
 * owner has it (or it is final), `unrecorded` when the store could not be asked (unavailable: the transfer is
 * resumed without counting, as any run the store outage interrupted).
 */
async function countRetry(state: CoordinatorState, run: LocalRun): Promise<number | 'fenced' | 'unrecorded'> {
  try {
    return (await state.o.store.recordRetry(run.id, run.epoch)).retries;
  } catch (err) {
    if (SluiceError.hasCode(err, 'STALE_EPOCH') || SluiceError.hasCode(err, 'ILLEGAL_TRANSITION'))
      return 'fenced';
    state.o.logger.warn({ transferId: run.id, err }, 'could not count a retryable failure');
    return 'unrecorded';
  }
}

export function schedule(
  state: CoordinatorState,
  run: LocalRun,
  ticket: Ticket,
  record: TransferRecord,
): void {
  run.withdraw = state.scheduler.start(ticket, () => execute(state, run, record));
}

/** The checkpoint port of a run: every write fenced by its epoch, `finishing` refused once it must stop. */
function checkpointPort(state: CoordinatorState, run: LocalRun, initial: unknown | null): CheckpointPort {
  const { store, limits, backplane } = state.o;
  return createCheckpointPort(store, run.id, run.epoch, {
    leaseMs: limits.leaseMs,
    initial,
    refuse: (step) => {
      if (run.stopReason === StopReason.fenced || run.stopReason === StopReason.leaseLost)
        throw new StaleEpochError(run.id, run.epoch);
      if (step === 'finishing' && run.stopReason !== null) throw new TransferTerminatedError(run.id);
      // The lease ran out by this process's clock (a pause, possibly around the store's confirmation): a peer may
      // have taken the transfer over or terminated it on the store's clock since. The watchdog would stop the run,
      // but only on its next tick — after the sink's publish when the process wakes up with the confirmation's
      // reply already in hand. Checked here, nothing is awaited between this check and the publish (docs/fencing.md
      // § Finishing holds the record).
      if (step === 'finishing' && performance.now() > run.leaseDeadline) {
        run.requestStop(StopReason.leaseLost);
        throw new StaleEpochError(run.id, run.epoch);
      }
    },
    // Every fenced write renewed the lease too.
    onLeaseRenewed: (startedAt) => {
      run.leaseDeadline = Math.max(run.leaseDeadline, startedAt + limits.leaseMs);
    },
    // The final save just confirmed the epoch in the store, and the lease it renewed still has more than half
    // its time: a takeover since then is no likelier than one between a fresh check and the publish. Another node
    // takes a live owner's transfer only once its lease expired (the lease watchdog stops this run first), or once
    // the backplane told it nobody runs it — which this run's responder contradicts only while peers could reach
    // it: the backplane must have stayed up since the responder was registered (a peer reads this run's epoch
    // only after that). An owner cut off from NATS still saves through the store, while a peer hears "no
    // responders", takes the transfer over or terminates it at once; skipping the check there published a
    // terminated transfer's file (test/finishing-shortcut-partition.test.ts). One store commit fewer per transfer
    // otherwise; past half the lease — a pause since the save — or after a backplane interruption the store is
    // asked again. Not once the node shuts down either: the direct backplane's peers reach this run through the
    // node's HTTP listener, which closes first (node.ts), and a refused connection is a "nobody" to them — the
    // store's finishing step then keeps their terminate or takeover off the record (docs/fencing.md).
    // The lease watchdog's test, asked synchronously by a sink before each effect a destination cannot fence
    // (JetStream): a process woken from a freeze runs on before that watchdog's timer fires.
    mayWrite: () => run.stopReason === null && performance.now() <= run.leaseDeadline,
    recentlyConfirmed: () =>
      !state.closing &&
      performance.now() < run.leaseDeadline - limits.leaseMs / 2 &&
      run.answeringSince !== null &&
      backplane.reachableSince(run.answeringSince),
  });
}

async function execute(state: CoordinatorState, run: LocalRun, record: TransferRecord): Promise<void> {
  // Stopped while queued: settleStopped already ended it.
  if (run.phase !== RunPhase.queued) return;
  // Queued until its lease ran low or out by this process's clock (a backlog, a late heartbeat): a heartbeat
  // confirms the store still lets this epoch own it before anything runs; the watchdog stops running runs only
  // (leases.ts).
  if (!state.hasLeaseToStart(run)) {
    const confirmed = await state.confirmLease(run);
    if (run.phase !== RunPhase.queued) return; // stopped (and settled) while it waited
    if (!confirmed) {
      stopRun(state, run, StopReason.leaseLost);
      return;
    }
  }
  run.dispatch({ type: 'started', request: record.request });
  const { store, logger } = state.o;
  const id = run.id;
  try {
    if (run.stopReason !== null) {
      await settleStopped(state, run, null);
      return;
    }
    if (record.state === 'RECEIVED') await transitionOnce(store, id, run.epoch, { to: 'IN_PROGRESS' });
    if (run.stopReason !== null) {
      // Stopped while the transition was in flight: nothing ran yet.
      await settleStopped(state, run, null);
      return;
    }
    const runnable = run.runnable ?? state.o.policy.confine(record.request);
    logger.info(
      { transferId: id, epoch: run.epoch, resumed: record.checkpoint !== null },
      'transfer started',
    );
    const result = await state.o.execute(runnable, {
      checkpoint: checkpointPort(state, run, record.checkpoint),
      signal: run.controller.signal,
      onProgress: (progress) => {
        run.progress = progress;
      },
    });
    if (run.stopReason === StopReason.fenced || run.stopReason === StopReason.leaseLost) {
      await settleStopped(state, run, null);
      return;
    }
    run.dispatch({ type: 'finishing' });
    if (await finish(state, run, 'COMPLETED', { result })) {
      logger.info({ transferId: id, epoch: run.epoch, result }, 'transfer completed');
      // Only now: until COMPLETED is recorded, what the sink kept is the resume point of a successor.
      await discard(state, record.request, runnable);
    }
  } catch (err) {
    if ((run.phase as RunPhase) !== RunPhase.running) return; // already finishing (its own step failed and logged)
    if (run.stopReason !== null || SluiceError.hasCode(err, 'STALE_EPOCH')) {
      if (run.stopReason === null) run.requestStop(StopReason.fenced);
      await settleStopped(state, run, err);
      return;
    }
    const error = asSluiceError(err);
    if (error.details?.retryable === true) {
      // The destination or source is unreachable for now (NATS restarting, say): not the transfer's fault. The
      // failure is counted in the store, fenced by this run's epoch; within the budget the transfer stays ours
      // with a fresh lease, and the next heartbeat finds it orphaned and resumes it from its checkpoint (a new
      // epoch). Past MAX_RETRIES failures without progress it fails for good.
      const counted = await countRetry(state, run);
      if (counted === 'fenced') {
        run.requestStop(StopReason.fenced);
        await settleStopped(state, run, err);
        return;
      }
      if (counted === 'unrecorded' || counted <= MAX_RETRIES) {
        logger.warn(
          { transferId: id, retries: counted, code: error.code, message: error.message },
          'transfer interrupted by an unreachable peer; will resume from its checkpoint',
        );
        run.requestStop(StopReason.leaseLost);
        await settleStopped(state, run, err);
        return;
      }
    }
    if (error.code === 'STORE_UNAVAILABLE') {
      // Not the transfer's fault. It stays ours in the store: once the store answers again the heartbeat
      // finds it orphaned and runs it again from its checkpoint (or its lease lapses and a sweeper does).
      logger.warn({ transferId: id, err }, 'store unavailable mid-transfer; will resume when it is back');
      run.requestStop(StopReason.leaseLost);
      await settleStopped(state, run, err);
      return;
    }
    run.dispatch({ type: 'finishing' });
    const to = error.code === 'TRANSFER_TERMINATED' ? 'TERMINATED' : 'FAILED';
    const ended = await finish(state, run, to, { error: { code: error.code, message: error.message } });
    if (ended) await discard(state, record.request, run.runnable);
    logger.warn({ transferId: id, code: error.code, message: error.message }, 'transfer did not complete');
  } finally {
    await settle(state, run);
  }
}
