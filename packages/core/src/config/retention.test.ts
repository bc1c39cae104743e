import { describe, expect, it } from 'vitest';
import { transferRetentionMs } from './retention.js';

describe('transferRetentionMs', () => {
  it('is a whole number of milliseconds for any fraction of a day, and 0 only for "forever"', () => {
    for (const transferDays of [0.00001, 0.7, 1.1, 2.3, 1 / 86_400, 30, 36_500, 1e-12]) {
      const ms = transferRetentionMs({ transferDays });
      expect({ transferDays, whole: Number.isSafeInteger(ms), positive: ms > 0 }).toEqual({
        transferDays,
        whole: true,
        positive: true,
      });
    }
    expect(transferRetentionMs({ transferDays: 1.1 })).toBe(95_040_000);
    expect(transferRetentionMs({ transferDays: 0 })).toBe(0);
  });
});
