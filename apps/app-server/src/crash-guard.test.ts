import { describe, expect, it } from 'vitest';
import { isDatabaseConnectionLoss } from './crash-guard.js';

describe('isDatabaseConnectionLoss', () => {
  it('recognises a dying PostgreSQL connection and nothing else', () => {
    const terminated = Object.assign(new Error('terminating connection due to administrator command'), {
      code: '57P01',
    });
    expect(isDatabaseConnectionLoss(terminated)).toBe(true);
    expect(
      isDatabaseConnectionLoss(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' })),
    ).toBe(true);
    const unexpected = new Error('Connection terminated unexpectedly');
    unexpected.stack = `Error: Connection terminated unexpectedly\n    at Connection.<anonymous> (/app/node_modules/.pnpm/pg@8.23.1/node_modules/pg/lib/client.js:204:73)`;
    expect(isDatabaseConnectionLoss(unexpected)).toBe(true);
    expect(isDatabaseConnectionLoss(new Error('Connection terminated unexpectedly'))).toBe(false);
    expect(isDatabaseConnectionLoss(new TypeError('x is not a function'))).toBe(false);
    expect(isDatabaseConnectionLoss('57P01')).toBe(false);
  });
});
