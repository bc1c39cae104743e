import { SluiceError, type TransferRecord, type TransferRequest } from '@sluice/core';
import type { CoordinatorState } from './context.js';
import { schedule, settle, settleStopped, stopRun } from './execution.js';
import { LocalRun, RunPhase, StopReason } from './local-run.js';
import type { Ticket } from './scheduler.js';
import { progressView } from './view.js';

/**
 * What to claim: a new id (insert), or an existing record from its current epoch (takeover). `runnable` is the
 * request with its paths already confined, when the caller just did that (a submit): the run uses it instead of
 * resolving every path again (each confinement is a `realpath` per file path, on the event loop).
 */
export type ClaimTarget =
  | { via: 'new'; request: TransferRequest; hash: string; runnable?: TransferRequest }
  | {
      via: 'takeover';
      record: TransferRecord;
      cause: 'resubmit' | 'restart' | 'sweeper' | 'orphan';
      /** Only when the owner's lease expired by the store's clock (the backplane could not tell). */
      requireExpiredLease: boolean;
      runnable?: TransferRequest;
    };

export type ClaimResult =
  | { status: 'claimed'; run: LocalRun; record: TransferRecord }
  /** Another claim of this id is in flight on this node: look again once it settled. */
  | { status: 'busy' }
  /** The store gave it to someone else, or it moved on (epoch changed, now terminal). */
  | { status: 'lost' }
  /** A new id's insert found the id already stored (same request): the stored record, read by that statement. */
  | { status: 'exists'; record: TransferRecord }
  /** The owner's lease is still fresh by the store's clock. */
  | { status: 'lease-held' };

/**
 * The one way this node becomes a transfer's owner, for new submits, takeovers and every kind of adoption:
 * the responder answers for the id *before* the store commits the claim (so the record never says "owned"
 * while nobody answers for it), a stop that arrives meanwhile is held until the claim's outcome is known
 * and then acted on at the claimed epoch, and only a confirmed claim is scheduled.
 */
export async function claim(
  state: CoordinatorState,
  target: ClaimTarget,
  ticket: Ticket,
): Promise<ClaimResult> {
  const id = target.via === 'new' ? target.request.id : target.record.id;
  // Checked synchronously: one claim per id per node at a time.
  if (state.claiming.has(id)) {
    state.scheduler.cancel(ticket);
    return { status: 'busy' };
  }
  if (target.via === 'takeover' && ownsNewerEpoch(state, id, target.record.epoch)) {
    state.scheduler.cancel(ticket);
    return { status: 'lost' };
  }
  const attempt = claimWith(state, target, ticket, id);
  state.claiming.set(id, attempt);
  try {
    return await attempt;
  } finally {
    if (state.claiming.get(id) === attempt) state.claiming.delete(id);
  }
}

async function claimWith(
  state: CoordinatorState,
  target: ClaimTarget,
  ticket: Ticket,
  id: string,
): Promise<ClaimResult> {
  const { store, identity, limits, backplane } = state.o;
  const hash = target.via === 'new' ? target.hash : target.record.requestHash;
  const run = new LocalRun(id, hash, target.runnable ?? null);
  const giveUp = async () => {
    state.scheduler.cancel(ticket);
    await settle(state, run);
  };
  try {
    await retireLocal(state, id);
    run.answeringSince = performance.now();
    run.registration = await backplane.serve(id, {
      report: () => ({
        nodeId: identity.nodeId,
        address: identity.address,
        epoch: run.epoch,
        progress: {
          state: run.phase,
          recordsRead: run.progress?.recordsRead ?? 0,
          recordsWritten: run.progress?.recordsWritten ?? 0,
          // What GET /v1/transfers/:id shows, for the nodes that do not run it (view.ts reportedProgress).
          ...(run.progress ? { view: progressView(run.progress) } : {}),
        },
      }),
      terminate: async () => {
        stopRun(state, run, StopReason.terminate);
        await run.done;
      },
    });
    const claimStartedAt = performance.now();
    let record: TransferRecord;
    if (target.via === 'new') {
      const outcome = await store.submit({
        request: target.request,
        requestHash: hash,
        owner: identity,
        leaseMs: limits.leaseMs,
        // Claimed and started by this node: the insert is the one commit before the 201.
        state: 'IN_PROGRESS',
      });
      if (!outcome.created) {
        await giveUp();
        return { status: 'exists', record: outcome.record };
      }
      record = outcome.record;
    } else {
      try {
        record = await store.takeOver(id, target.record.epoch, identity, limits.leaseMs, {
          requireExpiredLease: target.requireExpiredLease,
        });
      } catch (err) {
        const lost =
          SluiceError.hasCode(err, 'STALE_EPOCH') || SluiceError.hasCode(err, 'ILLEGAL_TRANSITION');
        if (lost || SluiceError.hasCode(err, 'LEASE_HELD')) {
          await giveUp();
          return { status: lost ? 'lost' : 'lease-held' };
        }
        throw err;
      }
    }
    run.dispatch({
      type: 'claimed',
      epoch: record.epoch,
      claimStartedAt,
      leaseMs: limits.leaseMs,
      heartbeatGeneration: state.heartbeatGeneration,
    });
    state.runs.set(id, run);
    if (target.via === 'takeover') {
      state.o.metrics.takeovers.inc({ via: target.cause });
      state.o.logger.info(
        { transferId: id, epoch: record.epoch, previousOwner: target.record.ownerNodeId, via: target.cause },
        'took the transfer over',
      );
    }
    // A shutdown that began meanwhile hands the claim straight back (its lease released for another node).
    if (state.closing) run.requestStop(StopReason.handback);
    // A stop that arrived while the claim was in flight (a terminate, a shutdown) acts now, at our epoch.
    if (run.stopReason !== null) {
      state.scheduler.cancel(ticket);
      await settleStopped(state, run, null);
      return { status: 'claimed', run, record: (await store.get(id)) ?? record };
    }
    schedule(state, run, ticket, record);
    return { status: 'claimed', run, record };
  } catch (err) {
    if (run.phase === RunPhase.claiming) await giveUp();
    throw err;
  }
}

/**
 * Whether this node already owns the transfer at an epoch newer than `epoch`: a takeover from `epoch` is then
 * based on a record read before this node's own claim (a resend whose owner lookup answered late). It can only
 * lose the store's compare-and-set, and must not retire the live run on its way there — that stopped the run
 * and made the next resend take the transfer over from this very node, one wasted attempt per late reply.
 */
function ownsNewerEpoch(state: CoordinatorState, id: string, epoch: number): boolean {
  const local = state.runs.get(id);
  return local !== undefined && local.epoch > epoch;
}

/** Stops and waits out an older local run of the same id (it was fenced), so its responder is gone. */
async function retireLocal(state: CoordinatorState, id: string): Promise<void> {
  const previous = state.runs.get(id);
  if (!previous) return;
  stopRun(state, previous, StopReason.fenced);
  await previous.done;
}
