import {
  BackplaneUnavailableError,
  IllegalTransitionError,
  SluiceError,
  StoreUnavailableError,
  TransferNotFoundError,
  type TransferRecord,
  type WhoRunsOptions,
} from '@sluice/core';
import { type CoordinatorState, type DestinationFenceHold, sleep } from './context.js';
import { discard, stopRun } from './execution.js';
import { RunPhase, StopReason } from './local-run.js';
import { type TransferView, transferView } from './view.js';

const ATTEMPTS = 8;

/**
 * Terminates a transfer wherever it runs and resolves with the record once the work has stopped. The record
 * turns TERMINATED only by its owner, after the owner stopped — or, for an owner that is gone, in one store
 * statement that also makes this node the owner (`terminateAbandoned`), so no crash between two writes can
 * leave this node owning a live transfer. An owner the backplane cannot account for (silent, or the backplane
 * is down) is terminated only once its lease expired by the store's clock — and so is one the backplane calls
 * gone that had passed its fenced finishing step (the store refuses `LEASE_HELD`): it may be publishing, cut off
 * from the backplane. A silent or finishing owner is waited for, for at most a lease and a heartbeat; then the
 * answer is what the record says (COMPLETED → `ILLEGAL_TRANSITION`), or `BACKPLANE_UNAVAILABLE` while its lease
 * stays fresh.
 */
export async function terminate(state: CoordinatorState, id: string): Promise<TransferView> {
  const { store, backplane, limits } = state.o;
  for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
    const pending = state.claiming.get(id);
    if (pending) await pending.catch(() => {});
    const record = await store.get(id);
    if (!record) throw new TransferNotFoundError(id);
    // Terminating again is a no-op; a transfer that finished (or finished while being stopped) cannot be.
    if (record.state === 'TERMINATED') return transferView(record);
    if (record.state === 'COMPLETED' || record.state === 'FAILED')
      throw new IllegalTransitionError(id, record.state, 'TERMINATED');
    const local = state.runs.get(id);
    if (local && local.epoch === record.epoch) {
      stopRun(state, local, StopReason.terminate);
      await local.stoppedWorking;
      // Stopped, but the store is away: the run records its outcome once the store answers (and keeps the
      // transfer meanwhile, so nothing resumes it); the caller is told so rather than kept waiting.
      if (local.phase === RunPhase.awaitingStore)
        throw new StoreUnavailableError(
          `The transfer store is unavailable: "${id}" has stopped here and records its outcome once the store answers again`,
        );
      continue;
    }
    const query: WhoRunsOptions = {
      timeoutMs: limits.ownerWaitMs,
      ownerAddress: record.ownerAddress,
      ownerInstance: record.ownerInstance,
    };
    const answer = await backplane.terminate(id, query);
    if (answer.status === 'terminated') continue;
    if (answer.status === 'not-running') {
      const done = await terminateAbandoned(state, record, false);
      if (done) return transferView(done);
      if (done === null) continue; // the record moved on: look again
      // LEASE_HELD: the owner passed its fenced finishing step and may be publishing right now, cut off from the
      // backplane rather than gone; it records its outcome, or its lease runs out (its watchdog stops it before
      // any publish). Waited for as a silent owner is.
    }
    const reason = answer.status === 'not-running' ? 'finishing, not answering' : answer.reason;
    // Unknown: a silent owner (connected, not answering) may be frozen or just busy; wait for its lease.
    const waitsForLease = answer.status === 'not-running' || answer.silent === true;
    const deadline = performance.now() + (waitsForLease ? limits.leaseMs + limits.heartbeatMs : 0);
    for (;;) {
      const done = await terminateAbandoned(state, record, true);
      if (done) return transferView(done);
      if (done === null) break; // the record moved on (COMPLETED, say): look again, and answer what it says
      if (performance.now() >= deadline)
        throw new BackplaneUnavailableError(
          `Cannot reach the owner of "${id}" (${reason}); its lease is fresh, try again later`,
        );
      await sleep(Math.min(250, limits.heartbeatMs));
    }
  }
  return transferView((await store.get(id)) ?? raise(new TransferNotFoundError(id)));
}

/**
 * One statement: owner and TERMINATED together. The terminated record; `null` when the record moved on (epoch
 * changed or already final: look again); `undefined` when the owner's lease is still fresh.
 */
async function terminateAbandoned(
  state: CoordinatorState,
  record: TransferRecord,
  requireExpiredLease: boolean,
): Promise<TransferRecord | null | undefined> {
  const { store, identity, metrics, logger } = state.o;
  // The destination's fence first, held across the store's statement: the old owner may be frozen inside a sink
  // transaction, and its COMMIT must land before the record turns TERMINATED or not at all.
  const hold = await holdFence(state, record);
  try {
    let terminated: TransferRecord;
    try {
      terminated = await store.terminateAbandoned(record.id, record.epoch, identity, { requireExpiredLease });
    } catch (err) {
      await hold?.release().catch(() => {});
      throw err;
    }
    await hold?.commit().catch((err: unknown) => {
      logger.warn({ transferId: record.id, err }, 'could not fence the destination of a terminated transfer');
    });
    metrics.finished.inc({ state: 'TERMINATED' });
    logger.info(
      { transferId: record.id, epoch: terminated.epoch, previousOwner: record.ownerNodeId },
      'terminated a transfer whose owner is gone',
    );
    await discard(state, terminated.request);
    return terminated;
  } catch (err) {
    if (SluiceError.hasCode(err, 'LEASE_HELD')) return undefined;
    if (SluiceError.hasCode(err, 'STALE_EPOCH') || SluiceError.hasCode(err, 'ILLEGAL_TRANSITION'))
      return null;
    throw err;
  }
}

/**
 * The destination's fence at the epoch a terminate gives the record, or null (a destination fenced otherwise).
 * Best effort: a destination that cannot be reached does not block the terminate — an old owner cannot write there
 * either until it is back, and its own watchdog stops it first.
 */
async function holdFence(
  state: CoordinatorState,
  record: TransferRecord,
): Promise<DestinationFenceHold | null> {
  const { fenceDestination, policy, logger } = state.o;
  if (!fenceDestination) return null;
  try {
    return await fenceDestination(policy.confine(record.request, { access: false }), record.epoch + 1);
  } catch (err) {
    logger.warn({ transferId: record.id, err }, 'could not fence the destination before a terminate');
    return null;
  }
}

function raise(err: Error): never {
  throw err;
}
