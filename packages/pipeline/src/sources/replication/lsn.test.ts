import { SluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { compareLsn, formatLsn, parseLsn } from './lsn.js';

describe('LSNs', () => {
  it('parses and formats the way PostgreSQL prints them', () => {
    expect(formatLsn(parseLsn('16/b374d848'))).toBe('16/B374D848');
    expect(compareLsn('0/10', '0/9')).toBe(1);
  });

  it('refuses anything else with a typed VALIDATION_FAILED error', () => {
    for (const text of ['', '16', '16/', 'x/1', '1/2/3', '123456789/0']) {
      let thrown: unknown;
      try {
        parseLsn(text);
      } catch (err) {
        thrown = err;
      }
      expect(SluiceError.hasCode(thrown, 'VALIDATION_FAILED'), text).toBe(true);
      expect((thrown as SluiceError).status).toBe(400);
    }
  });
});
