import type { OwnerAnswer, TransferRecord, WhoRunsOptions } from '@sluice/core';
import { type CoordinatorState, sleep } from './context.js';

/**
 * Asks the backplane who runs a transfer, ignoring answers from responders older than the record's epoch (a
 * stale owner that came back, or a node still claiming): those never prove the current owner is alive.
 */
export async function whoRuns(state: CoordinatorState, record: TransferRecord): Promise<OwnerAnswer> {
  const { backplane, limits } = state.o;
  const deadline = Date.now() + limits.ownerWaitMs;
  for (;;) {
    // The owner's address (direct strategy) and instance (NATS asks that instance's subject) from the record.
    const query: WhoRunsOptions = {
      timeoutMs: limits.ownerWaitMs,
      ownerAddress: record.ownerAddress,
      ownerInstance: record.ownerInstance,
    };
    const answer = await backplane.whoRuns(record.id, query);
    if (answer.status !== 'owner' || answer.owner.epoch >= record.epoch) return answer;
    if (Date.now() >= deadline)
      return { status: 'unknown', reason: `only a stale responder (epoch ${answer.owner.epoch}) answered` };
    await sleep(20);
  }
}

/**
 * How an owner change may proceed given the backplane's answer: a definite "nobody" takes over at once (the
 * crash case stays fast; a false "nobody" costs wasted work, never a duplicate effect, because every effect is
 * fenced where it lands — docs/operations.md § Guarantees); an answer the backplane could not make certain
 * takes over only once the lease expired by the store's clock; a live owner is left alone.
 */
export function ownerChange(answer: OwnerAnswer): 'leave' | 'now' | 'after-lease' {
  if (answer.status === 'owner') return 'leave';
  return answer.status === 'nobody' ? 'now' : 'after-lease';
}
