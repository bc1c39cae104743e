import { describe, expect, it, vi } from 'vitest';
import { ERROR_CASES } from '../test/error-cases.js';
import {
  asSluiceError,
  BadRecordError,
  CacheClosedError,
  CacheReadOnlyError,
  ConfigError,
  ErrorCode,
  IdempotencyConflictError,
  IdempotencyKeyMismatchError,
  IllegalTransitionError,
  InternalError,
  InvalidQueryError,
  PathNotAllowedError,
  PayloadTooLargeError,
  QueueFullError,
  RecordNotFoundError,
  SchemaMismatchError,
  ShuttingDownError,
  SinkError,
  SluiceError,
  SourceError,
  STATUS_BY_CODE,
  StaleEpochError,
  StoreUnavailableError,
  statusOf,
  TransferNotFoundError,
  TransferTerminatedError,
  UnknownConnectionError,
  UnknownEndpointError,
  UnsupportedAddressTypeError,
  UnsupportedMediaTypeError,
  ValidationError,
} from './errors.js';
import { PROBLEM_CONTENT_TYPE, toProblem } from './problem.js';

describe('error classes', () => {
  it.each(ERROR_CASES.map((c) => [c.error.name, c] as const))(
    '%s has its stable code and status',
    (_name, { error, cls, code, status }) => {
      expect(error).toBeInstanceOf(cls);
      expect(error).toBeInstanceOf(SluiceError);
      expect(error).toBeInstanceOf(Error);
      expect(error.code).toBe(code);
      expect(error.status).toBe(status);
      expect(error.name).toBe(cls.name);
      expect(error.message.length).toBeGreaterThan(0);
      expect(SluiceError.isInstance(error)).toBe(true);
      expect(SluiceError.hasCode(error, code)).toBe(true);
      expect(typeof error.stack).toBe('string');
    },
  );

  it('covers every error code except INTERNAL with a class', () => {
    const covered = new Set(ERROR_CASES.map((c) => c.code));
    const missing = Object.values(ErrorCode).filter((code) => !covered.has(code));
    expect(missing).toEqual(['INTERNAL']);
  });

  it('ErrorCode values equal their keys (codes are stable strings)', () => {
    for (const [key, value] of Object.entries(ErrorCode)) expect(value).toBe(key);
  });

  it('keeps the cause and details', () => {
    const root = new Error('socket closed');
    const err = new StoreUnavailableError('database unreachable', { cause: root, details: { host: 'db' } });
    expect(err.cause).toBe(root);
    expect(err.details).toEqual({ host: 'db' });
    const bare = new SourceError('boom');
    expect(bare.cause).toBeUndefined();
    expect(Object.hasOwn(bare, 'cause')).toBe(false);
    expect(bare.details).toBeUndefined();
  });

  it('carries machine-readable details for the user-facing classes', () => {
    expect(new IdempotencyConflictError('t-1').details).toEqual({ id: 't-1' });
    expect(new UnsupportedAddressTypeError('destination', 's3').details).toEqual({
      role: 'destination',
      type: 's3',
    });
    expect(new StaleEpochError('t-1', 4, { details: { actualEpoch: 5 } }).details).toEqual({
      id: 't-1',
      expectedEpoch: 4,
      actualEpoch: 5,
    });
    expect(new IllegalTransitionError('t-1', 'FAILED', 'COMPLETED').details).toEqual({
      id: 't-1',
      from: 'FAILED',
      to: 'COMPLETED',
    });
    expect(new QueueFullError(7).retryAfterSeconds).toBe(7);
    expect(new QueueFullError(5, 'full', { limit: 'api.changes.maxPerClient', max: 3 }).details).toEqual({
      retryAfterSeconds: 5,
      limit: 'api.changes.maxPerClient',
      max: 3,
    });
    expect(new PayloadTooLargeError(2048).details).toEqual({ limitBytes: 2048 });
    expect(new SchemaMismatchError('c', 'x', 'y').details).toEqual({
      cache: 'c',
      expectedHash: 'x',
      actualHash: 'y',
    });
    expect(new BadRecordError('bad', { offset: 10 }).details).toEqual({ offset: 10 });
    expect(new ValidationError('v', [{ path: 'a.b', message: 'm' }]).errors).toEqual([
      { path: 'a.b', message: 'm' },
    ]);
    expect(new InvalidQueryError('q').errors).toEqual([]);
    expect(new ConfigError('c').errors).toEqual([]);
  });

  it('names the offending values in messages', () => {
    expect(new IdempotencyKeyMismatchError('hdr', 'body').message).toBe(
      'The Idempotency-Key header "hdr" differs from the body id "body"',
    );
    expect(new UnsupportedMediaTypeError(undefined).message).toContain('(none)');
    expect(new UnsupportedMediaTypeError('text/csv').message).toContain('"text/csv"');
    expect(new IllegalTransitionError('t-1', 'COMPLETED', 'IN_PROGRESS').message).toBe(
      'Transfer "t-1" cannot move from COMPLETED to IN_PROGRESS',
    );
  });

  it('clips huge caller-supplied text in messages but keeps it whole in details', () => {
    const huge = 'x'.repeat(1_000_000);
    const cases = [
      new TransferNotFoundError(huge),
      new PathNotAllowedError(huge),
      new UnknownEndpointError(huge),
      new RecordNotFoundError(huge, huge),
      new UnsupportedMediaTypeError(huge),
      new IdempotencyKeyMismatchError(huge, huge),
      new UnknownConnectionError(huge),
    ];
    for (const err of cases) expect(err.message.length).toBeLessThan(600);
    expect(new TransferNotFoundError(huge).details).toEqual({ id: huge });
  });

  it('quotes names so control characters cannot forge log lines', () => {
    expect(new UnknownEndpointError('a"\nb').message).toBe('No endpoint named "a\\"\\nb"');
  });
});

describe('STATUS_BY_CODE and statusOf', () => {
  it('gives every error code exactly one HTTP error status, and nothing else', () => {
    expect(Object.keys(STATUS_BY_CODE).sort()).toEqual(Object.values(ErrorCode).sort());
    for (const code of Object.values(ErrorCode)) {
      const status = STATUS_BY_CODE[code];
      expect(Number.isInteger(status), code).toBe(true);
      expect(status, code).toBeGreaterThanOrEqual(400);
      expect(status, code).toBeLessThanOrEqual(599);
      expect(statusOf(code)).toBe(status);
      // Whatever throws it, an error of a code carries that code's status.
      expect(new SluiceError({ code, message: 'm' }).status).toBe(status);
    }
  });

  it('agrees with every error class: the class passes its code, the table decides the status', () => {
    for (const { error, code, status } of ERROR_CASES) {
      expect(STATUS_BY_CODE[code]).toBe(status);
      expect(statusOf(error)).toBe(status);
    }
  });

  it('is 500 for unknown codes and for anything that is not a Sluice error', () => {
    for (const value of [
      'NOT_A_CODE',
      'toString',
      '__proto__',
      '',
      new Error('x'),
      new TypeError('x'),
      { code: 'QUEUE_FULL', status: 429 },
      null,
      undefined,
      42,
      Object.create(null),
    ])
      expect(statusOf(value)).toBe(500);
  });

  it('keeps the valid status of a branded error from another copy, and 500 for a malformed one', () => {
    const brand = Symbol.for('sluice.error');
    expect(statusOf({ [brand]: true, code: 'SOME_NEWER_CODE', status: 418 })).toBe(418);
    expect(statusOf({ [brand]: true, code: 'QUEUE_FULL', status: 1e9 })).toBe(500);
    expect(statusOf({ [brand]: true, code: 'QUEUE_FULL', status: 200 })).toBe(500);
    expect(statusOf({ [brand]: true })).toBe(500);
  });

  it('the corrected codes: a shutting-down node, a closed and a read-only cache manager', () => {
    expect(toProblem(new ShuttingDownError())).toMatchObject({
      status: 503,
      body: { code: 'NODE_SHUTTING_DOWN', type: 'https://sluice.dev/problems/node-shutting-down' },
    });
    expect(toProblem(new CacheClosedError()).body).toEqual({
      type: 'https://sluice.dev/problems/cache-closed',
      title: 'Service Unavailable',
      status: 503,
      detail: 'The cache manager is closed',
      code: 'CACHE_CLOSED',
    });
    expect(toProblem(new CacheReadOnlyError('run gc')).body).toEqual({
      type: 'https://sluice.dev/problems/cache-read-only',
      title: 'Forbidden',
      status: 403,
      detail: 'The cache manager is read-only; cannot run gc',
      code: 'CACHE_READ_ONLY',
      operation: 'run gc',
    });
    expect(PROBLEM_CONTENT_TYPE).toBe('application/problem+json');
  });

  it('InternalError is INTERNAL 500 and keeps its cause', () => {
    const cause = new Error('row vanished');
    const err = new InternalError('the store lost a row', { cause });
    expect(err).toMatchObject({ code: 'INTERNAL', status: 500, name: 'InternalError', cause });
    expect(toProblem(err).body.detail).toBe('An internal error occurred');
  });

  it('TransferTerminatedError carries the reason of the stop in its details', () => {
    expect(new TransferTerminatedError('t-1', { details: { reason: 'handback' } }).details).toEqual({
      id: 't-1',
      reason: 'handback',
    });
  });
});

describe('SluiceError.isInstance', () => {
  it('is false for anything that is not a Sluice error', () => {
    for (const value of [
      new Error('x'),
      new TypeError('x'),
      null,
      undefined,
      0,
      'SluiceError',
      { code: 'VALIDATION_FAILED', status: 400 },
      { [Symbol.for('sluice.error')]: 'true' },
      { [Symbol('sluice.error')]: true },
      Object.create(null),
    ]) {
      expect(SluiceError.isInstance(value)).toBe(false);
    }
  });

  it('recognizes an error thrown by a second copy of the module', async () => {
    vi.resetModules();
    const copy = await import('./errors.js');
    expect(copy.SluiceError).not.toBe(SluiceError);

    const foreign = new copy.StaleEpochError('t-1', 2);
    expect(foreign).not.toBeInstanceOf(SluiceError);
    expect(SluiceError.isInstance(foreign)).toBe(true);
    expect(SluiceError.hasCode(foreign, 'STALE_EPOCH')).toBe(true);
    expect(SluiceError.hasCode(foreign, 'QUEUE_FULL')).toBe(false);

    // ... and the other way round.
    expect(copy.SluiceError.isInstance(new QueueFullError(1))).toBe(true);
    // asSluiceError passes a foreign error through instead of wrapping it as INTERNAL.
    expect(asSluiceError(foreign)).toBe(foreign);
  });

  it('recognizes a plain object carrying the brand (e.g. a structured clone across a boundary)', () => {
    const branded = { [Symbol.for('sluice.error')]: true, code: 'QUEUE_FULL', status: 429, message: 'full' };
    expect(SluiceError.isInstance(branded)).toBe(true);
    expect(SluiceError.hasCode(branded, 'QUEUE_FULL')).toBe(true);
  });

  it('brands instances with the registry symbol, not a module-local one', () => {
    const err = new SinkError('x');
    expect((err as unknown as Record<symbol, unknown>)[Symbol.for('sluice.error')]).toBe(true);
  });
});

describe('asSluiceError', () => {
  it('returns Sluice errors unchanged', () => {
    const err = new QueueFullError(1);
    expect(asSluiceError(err)).toBe(err);
  });

  it('wraps an Error as INTERNAL 500, keeping it as the cause', () => {
    const cause = new RangeError('index out of range');
    const wrapped = asSluiceError(cause);
    expect(wrapped).toBeInstanceOf(SluiceError);
    expect(wrapped.code).toBe('INTERNAL');
    expect(wrapped.status).toBe(500);
    expect(wrapped.message).toBe('index out of range');
    expect(wrapped.cause).toBe(cause);
  });

  it('wraps thrown non-errors', () => {
    expect(asSluiceError('plain string').message).toBe('plain string');
    expect(asSluiceError(42).message).toBe('42');
    expect(asSluiceError(undefined).code).toBe('INTERNAL');
  });

  it('never throws, even for values that cannot be turned into a string', () => {
    const noProto = Object.create(null);
    const hostile = {
      toString() {
        throw new Error('gotcha');
      },
    };
    expect(asSluiceError(noProto).code).toBe('INTERNAL');
    expect(asSluiceError(hostile).code).toBe('INTERNAL');
    expect(asSluiceError(hostile).cause).toBe(hostile);
  });
});
