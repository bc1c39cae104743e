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
 * The error of a refused write on `id` at `epoch`, from the row as read after it (`current`, undefined when
 * gone). `leaseCondition`: the statement also required an expired lease.
 *
 * @example
 * ```ts
 * refusalOf('t-1', 2, 'a checkpoint', { state: 'IN_PROGRESS', epoch: 3 }); // StaleEpochError (epoch 3)
 * ```
 */
export function refusalOf(
  id: string,
  epoch: number,
  operation: string,
  current: { state: TransferState; epoch: number } | undefined,
  leaseCondition = false,
): Error {
  if (!current) return new TransferNotFoundError(id);
  if (Number(current.epoch) !== epoch) {
    return new StaleEpochError(id, epoch, { details: { epoch: Number(current.epoch) } });
  }
  if (isTerminal(current.state)) return new TransferFinalError(id, current.state, operation);
  // Same epoch, active state: the statement's lease condition refused it (the owner's lease is fresh).
  if (leaseCondition) return new LeaseHeldError(id);
  // Same epoch, active state, yet nothing changed: the record moved between the two statements.
  return new StaleEpochError(id, epoch);
}
