import { describe, expect, it } from 'vitest';
import {
  ACTIVE_STATES,
  ALL_STATES,
  canTransition,
  isTerminal,
  nextStates,
  TERMINAL_STATES,
} from './state-machine.js';
import { TransferState, TransferStateSchema } from './transfer.js';

/** The whole contract, written out: every (from, to) pair that is legal. Everything else is illegal. */
const LEGAL = new Set([
  'RECEIVED->IN_PROGRESS',
  'RECEIVED->TERMINATED',
  'IN_PROGRESS->COMPLETED',
  'IN_PROGRESS->FAILED',
  'IN_PROGRESS->TERMINATED',
]);

const STATES = ['RECEIVED', 'IN_PROGRESS', 'COMPLETED', 'FAILED', 'TERMINATED'] as const;
const MATRIX = STATES.flatMap((from) => STATES.map((to) => [from, to, LEGAL.has(`${from}->${to}`)] as const));

describe('transfer states', () => {
  it('are the five lifecycle states, in order', () => {
    expect(ALL_STATES).toEqual(STATES);
    expect(Object.values(TransferState)).toEqual(STATES);
    expect(TransferStateSchema.options).toEqual(STATES);
  });

  it('split into active and terminal states', () => {
    expect(ACTIVE_STATES).toEqual(['RECEIVED', 'IN_PROGRESS']);
    expect(TERMINAL_STATES).toEqual(['COMPLETED', 'FAILED', 'TERMINATED']);
    for (const s of STATES) expect(isTerminal(s)).toBe(TERMINAL_STATES.includes(s));
  });

  it('validate with the schema', () => {
    for (const s of STATES) expect(TransferStateSchema.parse(s)).toBe(s);
    for (const bad of ['received', 'DONE', '', null, 1, 'RECEIVED ']) {
      expect(TransferStateSchema.safeParse(bad).success).toBe(false);
    }
  });
});

describe('canTransition: the full 5×5 matrix', () => {
  it('has 25 cells, 5 of them legal', () => {
    expect(MATRIX).toHaveLength(25);
    expect(MATRIX.filter(([, , legal]) => legal)).toHaveLength(5);
  });

  it.each(MATRIX)('%s -> %s is legal: %s', (from, to, legal) => {
    expect(canTransition(from, to)).toBe(legal);
    expect(nextStates(from).includes(to)).toBe(legal);
  });

  it.each(TERMINAL_STATES.map((s) => [s]))('%s is final: no way out, not even to itself', (state) => {
    expect(nextStates(state)).toEqual([]);
    for (const to of STATES) expect(canTransition(state, to)).toBe(false);
  });

  it('never allows a self-transition or a step back', () => {
    for (const s of STATES) expect(canTransition(s, s)).toBe(false);
    expect(canTransition('IN_PROGRESS', 'RECEIVED')).toBe(false);
  });

  it('lets every active state be terminated', () => {
    for (const s of ACTIVE_STATES) expect(canTransition(s, 'TERMINATED')).toBe(true);
  });

  it('answers false (never throws) for states that are not states', () => {
    for (const bad of ['BOGUS', 'constructor', '__proto__', 'toString', 'hasOwnProperty', '']) {
      expect(canTransition(bad as TransferState, 'COMPLETED')).toBe(false);
      expect(canTransition('RECEIVED', bad as TransferState)).toBe(false);
      expect(nextStates(bad as TransferState)).toEqual([]);
    }
  });

  it('cannot be edited through the lists it hands out', () => {
    const next = nextStates('COMPLETED') as TransferState[];
    expect(() => next.push('IN_PROGRESS')).toThrow(TypeError);
    expect(canTransition('COMPLETED', 'IN_PROGRESS')).toBe(false);
    expect(() => (ALL_STATES as TransferState[]).pop()).toThrow(TypeError);
    expect(() => (TERMINAL_STATES as TransferState[]).push('RECEIVED')).toThrow(TypeError);
    expect(() => (ACTIVE_STATES as TransferState[]).push('COMPLETED')).toThrow(TypeError);
  });
});
