import { SluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { unwrapCursor, wrapCursor } from './cursor.js';

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (SluiceError.isInstance(err)) return `${err.code}/${err.status}`;
    throw err;
  }
  return 'none';
}

describe('generation-bound cursors', () => {
  it('round-trips on the generation that issued it', () => {
    const cursor = wrapCursor('items-0002', 'abc.def_=')!;
    expect(unwrapCursor(cursor, 'items-0002')).toBe('abc.def_=');
    expect(wrapCursor('items-0002', null)).toBeNull();
  });

  it('refuses a cursor of another generation with 410 CURSOR_EXPIRED', () => {
    const cursor = wrapCursor('items-0001', 'xyz')!;
    expect(codeOf(() => unwrapCursor(cursor, 'items-0002'))).toBe('CURSOR_EXPIRED/410');
  });

  it('refuses foreign strings with 400 INVALID_QUERY', () => {
    expect(codeOf(() => unwrapCursor('garbage', 'items-0001'))).toBe('INVALID_QUERY/400');
    expect(codeOf(() => unwrapCursor('.x', 'items-0001'))).toBe('INVALID_QUERY/400');
    expect(codeOf(() => unwrapCursor('a+b.x', 'items-0001'))).toBe('INVALID_QUERY/400');
  });
});
