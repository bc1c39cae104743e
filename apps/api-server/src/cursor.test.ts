import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { unwrapCursor, wrapCursor } from './cursor.js';

describe('generation-bound cursors', () => {
  it('round-trips on the generation that issued it', () => {
    const cursor = wrapCursor('items-0002', 'abc.def_=')!;
    expect(unwrapCursor(cursor, 'items-0002')).toBe('abc.def_=');
    expect(wrapCursor('items-0002', null)).toBeNull();
  });

  it('refuses a cursor of another generation with 410 CURSOR_EXPIRED', () => {
    const cursor = wrapCursor('items-0001', 'xyz')!;
    expect(expectSluiceError(() => unwrapCursor(cursor, 'items-0002'), 'CURSOR_EXPIRED').status).toBe(410);
  });

  it('refuses foreign strings with 400 INVALID_QUERY', () => {
    expect(expectSluiceError(() => unwrapCursor('garbage', 'items-0001'), 'INVALID_QUERY').status).toBe(400);
    expect(expectSluiceError(() => unwrapCursor('.x', 'items-0001'), 'INVALID_QUERY').status).toBe(400);
    expect(expectSluiceError(() => unwrapCursor('a+b.x', 'items-0001'), 'INVALID_QUERY').status).toBe(400);
  });
});
