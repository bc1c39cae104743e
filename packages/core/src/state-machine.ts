import { TransferState } from './transfer.js';

const ALLOWED: Readonly<Record<TransferState, readonly TransferState[]>> = {
  RECEIVED: ['IN_PROGRESS', 'TERMINATED'],
  IN_PROGRESS: ['COMPLETED', 'FAILED', 'TERMINATED'],
  COMPLETED: [],
  FAILED: [],
  TERMINATED: [],
};

/** True for states that never change again. */
export function isTerminal(state: TransferState): boolean {
  return (
    state === TransferState.COMPLETED || state === TransferState.FAILED || state === TransferState.TERMINATED
  );
}

/**
 * Whether a transfer may move from `from` to `to`.
 *
 * @example
 * ```ts
 * canTransition('IN_PROGRESS', 'COMPLETED'); // true
 * canTransition('COMPLETED', 'IN_PROGRESS'); // false: terminal states are final
 * ```
 */
export function canTransition(from: TransferState, to: TransferState): boolean {
  return ALLOWED[from].includes(to);
}

/** The states reachable from `from` in one step. */
export function nextStates(from: TransferState): readonly TransferState[] {
  return ALLOWED[from];
}

/** Every state, in lifecycle order. */
export const ALL_STATES: readonly TransferState[] = Object.values(TransferState);

/** Non-terminal states (the record is owned and may be running). */
export const ACTIVE_STATES: readonly TransferState[] = ALL_STATES.filter((s) => !isTerminal(s));
/** Terminal states. */
export const TERMINAL_STATES: readonly TransferState[] = ALL_STATES.filter(isTerminal);
