import { SluiceError, StaleEpochError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { isSchemaMissingError, isUnavailableError, TransferFinalError, toStoreError } from './errors.js';

function withCode(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

describe('toStoreError', () => {
  it.each([
    withCode('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED'),
    withCode('terminating connection due to administrator command', '57P01'),
    withCode('the database system is shutting down', '57P03'),
    withCode('canceling statement due to statement timeout', '57014'),
    withCode('canceling statement due to lock timeout', '55P03'),
    withCode('database "x" does not exist', '3D000'),
    new Error('Connection terminated unexpectedly'),
    new Error('Cannot use a pool after calling end on the pool'),
    new Error('driver has already been destroyed'),
    new TypeError('The database connection is not open'),
    withCode('database is locked', 'SQLITE_BUSY'),
    withCode('disk I/O error', 'SQLITE_IOERR_WRITE'),
    new AggregateError([withCode('connect ECONNREFUSED ::1:5432', 'ECONNREFUSED')], 'all failed'),
    new Error('wrapped', { cause: withCode('x', 'ECONNRESET') }),
  ])('maps %s to STORE_UNAVAILABLE with the cause kept', (err) => {
    expect(isUnavailableError(err)).toBe(true);
    const mapped = toStoreError(err, 'submit');
    expect(mapped.code).toBe('STORE_UNAVAILABLE');
    expect(mapped.status).toBe(503);
    expect(mapped.cause).toBe(err);
  });

  it('maps other driver errors to INTERNAL and passes Sluice errors through', () => {
    const constraint = withCode('duplicate key value violates unique constraint', '23505');
    expect(isUnavailableError(constraint)).toBe(false);
    expect(toStoreError(constraint, 'x').code).toBe('INTERNAL');
    const stale = new StaleEpochError('a', 1);
    expect(toStoreError(stale, 'x')).toBe(stale);
  });

  it('maps a missing table (PostgreSQL 42P01, SQLite "no such table") to STORE_UNAVAILABLE, reason schema-missing', () => {
    for (const err of [
      withCode('relation "transfers" does not exist', '42P01'),
      withCode('no such table: transfers', 'SQLITE_ERROR'),
    ]) {
      expect(isSchemaMissingError(err)).toBe(true);
      const mapped = toStoreError(err, 'submit');
      expect(mapped).toMatchObject({
        code: 'STORE_UNAVAILABLE',
        status: 503,
        details: { reason: 'schema-missing' },
      });
      expect(mapped.message).toMatch(/^The transfer store's schema is missing \(submit: /);
      expect(mapped.cause).toBe(err);
    }
    expect(isSchemaMissingError(withCode('near "selec": syntax error', 'SQLITE_ERROR'))).toBe(false);
    expect(toStoreError(withCode('column "x" does not exist', '42703'), 'x').code).toBe('INTERNAL');
  });

  it('TransferFinalError carries ILLEGAL_TRANSITION and says the state is final', () => {
    const err = new TransferFinalError('t-1', 'COMPLETED', 'a takeover');
    expect(SluiceError.hasCode(err, 'ILLEGAL_TRANSITION')).toBe(true);
    expect(err.message).toBe('Transfer "t-1" is COMPLETED, a final state; a takeover refused');
  });
});
