import { describe, expect, it } from 'vitest';
import { switchHoldReason } from './switch-gate.js';

describe('switchHoldReason', () => {
  const facts = { records: 100, servingRecords: 100, badRecords: 0 };

  it('lets a green switch when no gate is configured or every gate passes', () => {
    expect(switchHoldReason(undefined, facts)).toBeNull();
    expect(switchHoldReason({ mode: 'auto' }, { ...facts, records: 1 })).toBeNull();
    expect(
      switchHoldReason({ mode: 'auto', minRecordRatio: 0.9, maxBadRecords: 0 }, { ...facts, records: 90 }),
    ).toBeNull();
  });

  it('holds every green in manual mode, and one that breaks a gate in auto mode, naming each reason', () => {
    expect(switchHoldReason({ mode: 'manual' }, facts)).toBe('manual switch mode: waiting for promote');
    expect(switchHoldReason({ mode: 'auto', minRecordRatio: 0.9 }, { ...facts, records: 89 })).toBe(
      '89 records, fewer than 0.9 × 100 (the serving generation)',
    );
    expect(switchHoldReason({ mode: 'auto', maxBadRecords: 2 }, { ...facts, badRecords: 3 })).toBe(
      '3 bad records, more than the 2 allowed',
    );
    expect(
      switchHoldReason(
        { mode: 'manual', minRecordRatio: 1, maxBadRecords: 0 },
        { ...facts, records: 5, badRecords: 1 },
      ),
    ).toBe(
      'manual switch mode: waiting for promote; 5 records, fewer than 1 × 100 (the serving generation); 1 bad records, more than the 0 allowed',
    );
  });

  it('never holds the first generation of an endpoint (nothing serves yet)', () => {
    expect(
      switchHoldReason(
        { mode: 'manual', minRecordRatio: 1, maxBadRecords: 0 },
        { records: 0, servingRecords: null, badRecords: 9 },
      ),
    ).toBeNull();
  });
});
