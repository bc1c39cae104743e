import { AssertionError } from 'node:assert';
import { NotFoundError, SluiceError, StaleEpochError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { capturingLogger, expectSluiceError, MANUAL_CLOCK_START, ManualClock } from './index.js';

describe('expectSluiceError', () => {
  it('returns the error a function throws, at once, when its code matches', () => {
    const err = expectSluiceError(() => {
      throw new NotFoundError('no such node');
    }, 'NOT_FOUND');
    expect(err).toBeInstanceOf(SluiceError);
    expect(err.message).toBe('no such node');
  });

  it('awaits a promise, or a function that returns one, and returns its rejection', async () => {
    const fromPromise = await expectSluiceError(Promise.reject(new NotFoundError('gone')), 'NOT_FOUND');
    expect(fromPromise.message).toBe('gone');
    const fromFn = await expectSluiceError(async () => {
      throw new NotFoundError('later');
    }, 'NOT_FOUND');
    expect(fromFn.message).toBe('later');
  });

  it('fails on another code, naming both', async () => {
    expect(() =>
      expectSluiceError(() => {
        throw new NotFoundError('no such node');
      }, 'STALE_EPOCH'),
    ).toThrow(/expected a SluiceError STALE_EPOCH, got NOT_FOUND: no such node/);
    await expect(expectSluiceError(Promise.reject(new NotFoundError('x')), 'INTERNAL')).rejects.toThrow(
      AssertionError,
    );
  });

  it('fails on a plain Error, on success, and on a function that returns', async () => {
    const plain = Object.assign(new Error('raw'), { code: 'NOT_FOUND' });
    await expect(expectSluiceError(Promise.reject(plain), 'NOT_FOUND')).rejects.toThrow(
      /expected a SluiceError NOT_FOUND, got Error: raw/,
    );
    await expect(expectSluiceError(Promise.resolve(1), 'NOT_FOUND')).rejects.toThrow(/the promise resolved/);
    expect(() => expectSluiceError(() => 1, 'NOT_FOUND')).toThrow(/the call returned/);
    expect(() => expectSluiceError(() => 1, 'NOT_FOUND', 'case 3')).toThrow(
      /^case 3: expected a SluiceError NOT_FOUND, but the call returned$/,
    );
  });

  it('returns the very error thrown, details included', async () => {
    const thrown = new StaleEpochError('t-1', 1);
    const err = await expectSluiceError(Promise.reject(thrown), 'STALE_EPOCH');
    expect(err).toBe(thrown);
    expect(err.details).toEqual({ id: 't-1', expectedEpoch: 1 });
  });
});

describe('capturingLogger', () => {
  it('records level, message and fields of pino-style calls, in order', () => {
    const logger = capturingLogger();
    logger.info('started');
    logger.warn({ key: 'limits.bodyBytes' }, 'moved');
    logger.error({ err: 'boom' });
    expect(logger.entries).toEqual([
      { level: 'info', msg: 'started', fields: {} },
      { level: 'warn', msg: 'moved', fields: { key: 'limits.bodyBytes' } },
      { level: 'error', msg: undefined, fields: { err: 'boom' } },
    ]);
    expect(logger.warnings().map((e) => e.msg)).toEqual(['moved']);
    expect(logger.at('error')).toHaveLength(1);
  });

  it('a child adds its bindings and records into the same entries', () => {
    const logger = capturingLogger();
    logger.child({ component: 'cache' }).child({ cache: 'items' }).debug({ rows: 3 }, 'applied');
    expect(logger.entries).toEqual([
      { level: 'debug', msg: 'applied', fields: { component: 'cache', cache: 'items', rows: 3 } },
    ]);
  });
});

describe('ManualClock', () => {
  it('stands still until advanced or set', () => {
    const clock = new ManualClock();
    expect(clock.now().getTime()).toBe(MANUAL_CLOCK_START);
    expect(clock.now().getTime()).toBe(MANUAL_CLOCK_START);
    clock.advance(30_001);
    expect(clock.now().getTime()).toBe(MANUAL_CLOCK_START + 30_001);
    clock.set(new Date('2026-01-01T00:00:00.000Z'));
    expect(clock.now().toISOString()).toBe('2026-01-01T00:00:00.000Z');
  });
});
