/**
 * Why a fenced write changed nothing: every owner write is one conditional statement, and when it matches no
 * row the store reads the row's state and epoch once and names the reason with a typed error.
 */
import {
  isTerminal,
  LeaseHeldError,
  StaleEpochError,
  TransferNotFoundError,
  type TransferState,
} from '@sluice/core';
import { TransferFinalError } from './errors.js';

/**
 * The lease condition of a refused statement besides its fence: `none`; `expired` (the lease must have expired by
 * the store's clock); `expired-if-finishing` (an owner change on a "nobody": the lease must have expired when the
 * owner confirmed its finishing step at this epoch).
 */
export const LeaseCondition = {
  none: 'none',
  expired: 'expired',
  expiredIfFinishing: 'expired-if-finishing',
} as const;
export type LeaseCondition = (typeof LeaseCondition)[keyof typeof LeaseCondition];

/**
 * The error of a refused write on `id` at `epoch`, from the row as read after it (`current`, undefined when
 * gone). `leaseCondition`: what the statement required of the lease besides the fence.
 *
 * @example
 * ```ts
 * refusalOf('t-1', 2, 'a checkpoint', { state: 'IN_PROGRESS', epoch: 3, finishing_epoch: null }); // StaleEpochError (epoch 3)
 * ```
 */
export function refusalOf(
  id: string,
  epoch: number,
  operation: string,
  current: { state: TransferState; epoch: number; finishing_epoch: number | null } | undefined,
  leaseCondition: LeaseCondition = LeaseCondition.none,
): Error {
  if (!current) return new TransferNotFoundError(id);
  if (Number(current.epoch) !== epoch) {
    return new StaleEpochError(id, epoch, { details: { epoch: Number(current.epoch) } });
  }
  if (isTerminal(current.state)) return new TransferFinalError(id, current.state, operation);
  // Same epoch, active state: the statement's lease condition refused it (the owner's lease is fresh).
  if (leaseCondition === LeaseCondition.expired) return new LeaseHeldError(id);
  if (
    leaseCondition === LeaseCondition.expiredIfFinishing &&
    current.finishing_epoch !== null &&
    Number(current.finishing_epoch) === epoch
  )
    return new LeaseHeldError(id, { details: { finishing: true } });
  // Same epoch, active state, yet nothing changed: the record moved between the two statements.
  return new StaleEpochError(id, epoch);
}
