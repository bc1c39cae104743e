import { AssertionError } from 'node:assert';
import { type ErrorCode, SluiceError } from '@sluice/core';

/**
 * Asserts that `subject` fails with a {@link SluiceError} of `code`, and returns that error so the test can
 * assert on its details. `subject` is a promise (awaited), or a function: a function that throws is checked at
 * once (the result is the error, not a promise), one that returns a promise is awaited. Anything else — success,
 * a plain `Error`, another code — fails the test with what came instead (after `what`, when given, to say which
 * case of a loop failed).
 *
 * @example
 * ```ts
 * await expectSluiceError(store.release('nope', 1), 'TRANSFER_NOT_FOUND');
 * const err = expectSluiceError(() => unwrapCursor(cursor, 'items-0002'), 'CURSOR_EXPIRED');
 * expect(err.status).toBe(410);
 * ```
 */
export function expectSluiceError(subject: () => never, code: ErrorCode, what?: string): SluiceError;
export function expectSluiceError(
  subject: PromiseLike<unknown> | (() => PromiseLike<unknown>),
  code: ErrorCode,
  what?: string,
): Promise<SluiceError>;
export function expectSluiceError(subject: () => unknown, code: ErrorCode, what?: string): SluiceError;
export function expectSluiceError(
  subject: PromiseLike<unknown> | (() => unknown),
  code: ErrorCode,
  what?: string,
): SluiceError | Promise<SluiceError> {
  const expected = `${what === undefined ? '' : `${what}: `}expected a SluiceError ${code}`;
  if (typeof subject !== 'function') return settled(subject, code, expected);
  let result: unknown;
  try {
    result = subject();
  } catch (err) {
    return checked(err, code, expected);
  }
  if (isThenable(result)) return settled(result, code, expected);
  throw new AssertionError({ message: `${expected}, but the call returned`, actual: result });
}

async function settled(
  promise: PromiseLike<unknown>,
  code: ErrorCode,
  expected: string,
): Promise<SluiceError> {
  let value: unknown;
  try {
    value = await promise;
  } catch (err) {
    return checked(err, code, expected);
  }
  throw new AssertionError({ message: `${expected}, but the promise resolved`, actual: value });
}

function checked(err: unknown, code: ErrorCode, expected: string): SluiceError {
  if (!SluiceError.isInstance(err)) {
    const got = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    throw new AssertionError({ message: `${expected}, got ${got}`, actual: err });
  }
  if (err.code !== code) {
    throw new AssertionError({
      message: `${expected}, got ${err.code}: ${err.message}`,
      actual: err.code,
      expected: code,
      operator: 'strictEqual',
    });
  }
  return err;
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}
