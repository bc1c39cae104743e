import { describe, expect, it } from 'vitest';
import { silentLogger, systemClock } from './ports.js';

describe('systemClock', () => {
  it('tells the current time', () => {
    const before = Date.now();
    const now = systemClock.now();
    expect(now).toBeInstanceOf(Date);
    expect(now.getTime()).toBeGreaterThanOrEqual(before);
    expect(now.getTime()).toBeLessThanOrEqual(Date.now());
  });
});

describe('silentLogger', () => {
  it('accepts every call and returns nothing', () => {
    for (const level of ['debug', 'info', 'warn', 'error'] as const) {
      expect(silentLogger[level]({ a: 1 }, 'message')).toBeUndefined();
      expect(silentLogger[level]('message only')).toBeUndefined();
    }
  });
});
