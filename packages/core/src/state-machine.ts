import { TransferState } from './transfer.js';

// Frozen: `nextStates` hands these lists out, and a caller must not be able to edit the state machine.
const ALLOWED: Readonly<Record<TransferState, readonly TransferState[]>> = Object.freeze({
  RECEIVED: Object.freeze(['IN_PROGRESS', 'TERMINATED'] as const),
  IN_PROGRESS: Object.freeze(['COMPLETED', 'FAILED', 'TERMINATED'] as const),
  COMPLETED: Object.freeze([]),
  FAILED: Object.freeze([]),
  TERMINATED: Object.freeze([]),
});

/** The allowed next states; an unknown `from` (e.g. a corrupt row read from a store) has none. */
function allowedFrom(from: TransferState): readonly TransferState[] {
  return Object.hasOwn(ALLOWED, from) ? ALLOWED[from] : [];
}

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
  return allowedFrom(from).includes(to);
}

/** The states reachable from `from` in one step. */
export function nextStates(from: TransferState): readonly TransferState[] {
  return allowedFrom(from);
}

/** Every state, in lifecycle order. */
export const ALL_STATES: readonly TransferState[] = Object.freeze(Object.values(TransferState));

/** Non-terminal states (the record is owned and may be running). */
export const ACTIVE_STATES: readonly TransferState[] = Object.freeze(
  ALL_STATES.filter((s) => !isTerminal(s)),
);
/** Terminal states. */
export const TERMINAL_STATES: readonly TransferState[] = Object.freeze(ALL_STATES.filter(isTerminal));
