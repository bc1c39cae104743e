import { expectSluiceError } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { sealCursor, unwrapCursor, wrapCursor } from './cursor.js';
import { PositionSeal } from './position-seal.js';

const OLD = 'items-01jf3q0v9s6k2m8c4r1x7b5n2d';
const NEW = 'items-01jf3q0w00000000000000000a';

/** A cache cursor (base64url JSON, see packages/cache/src/cursor.ts) cut from `generation`. */
const innerOf = (generation: string) =>
  Buffer.from(JSON.stringify({ c: generation, o: 'id:a', f: 'x', k: [3] }), 'utf8').toString('base64url');

describe('generation-bound cursors', () => {
  it('round-trips on the generation that issued it', () => {
    const cursor = wrapCursor('items-0002', 'abc.def_=')!;
    expect(unwrapCursor(cursor, 'items-0002')).toBe('abc.def_=');
    expect(wrapCursor('items-0002', null)).toBeNull();
  });

  it('refuses a cursor of another generation with 410 CURSOR_EXPIRED', () => {
    // Generation names as the cache makes them (`<alias>-<26-character id>`), the inner part the cache's cursor.
    const cursor = wrapCursor(OLD, innerOf(OLD))!;
    expect(expectSluiceError(() => unwrapCursor(cursor, NEW), 'CURSOR_EXPIRED').status).toBe(410);
    const dashed = wrapCursor(
      'eu-orders-01jf3q0v9s6k2m8c4r1x7b5n2d',
      innerOf('eu-orders-01jf3q0v9s6k2m8c4r1x7b5n2d'),
    )!;
    expect(unwrapCursor.bind(null, dashed, 'eu-orders-01jf3q0v9s6k2m8c4r1x7b5n2e')).toThrow(
      /no longer serves/,
    );
  });

  it('defect: a garbage $after whose generation part is no generation of this endpoint answered 410 CURSOR_EXPIRED — now 400 INVALID_QUERY', () => {
    const refused = (cursor: string) =>
      expectSluiceError(() => unwrapCursor(cursor, NEW), 'INVALID_QUERY', cursor).status;
    // Before: 410 "belongs to cache generation \"items\"" — "aXRlbXM" is base64url of the alias alone.
    expect(refused('aXRlbXM.zzz')).toBe(400);
    for (const cursor of [
      wrapCursor('items-0001', innerOf('items-0001'))!, // an id that is no generation id
      wrapCursor('orders-01jf3q0v9s6k2m8c4r1x7b5n2d', innerOf('orders-01jf3q0v9s6k2m8c4r1x7b5n2d'))!, // another endpoint
      wrapCursor(OLD.toUpperCase(), innerOf(OLD.toUpperCase()))!, // ids are lower case
      wrapCursor(OLD, 'zzz')!, // the rest does not decode
      wrapCursor(OLD, innerOf(NEW))!, // the rest names another generation
      wrapCursor(OLD, Buffer.from('[1]').toString('base64url'))!, // the rest is no cursor object
      `${wrapCursor(OLD, 'x')!.slice(0, -1)}${innerOf(OLD)}+`, // not base64url
    ])
      expect(refused(cursor)).toBe(400);
  });

  it('refuses foreign strings with 400 INVALID_QUERY', () => {
    expect(expectSluiceError(() => unwrapCursor('garbage', 'items-0001'), 'INVALID_QUERY').status).toBe(400);
    expect(expectSluiceError(() => unwrapCursor('.x', 'items-0001'), 'INVALID_QUERY').status).toBe(400);
    expect(expectSluiceError(() => unwrapCursor('a+b.x', 'items-0001'), 'INVALID_QUERY').status).toBe(400);
  });

  it('opens a sealed cursor with its seal; under a row filter takes no plain one', () => {
    const seal = new PositionSeal('cursor-test-secret-0123456789abcdef');
    const sealed = sealCursor(seal, NEW, innerOf(NEW))!;
    expect(sealed.startsWith('~')).toBe(true);
    expect(unwrapCursor(sealed, NEW, { seal, required: true })).toBe(innerOf(NEW));
    // Still bound to its generation: after a switch it is the 410 of any cursor of the endpoint.
    expect(
      expectSluiceError(
        () => unwrapCursor(sealCursor(seal, OLD, innerOf(OLD))!, NEW, { seal, required: true }),
        'CURSOR_EXPIRED',
      ).status,
    ).toBe(410);
    const plain = wrapCursor(NEW, innerOf(NEW))!;
    expect(
      expectSluiceError(() => unwrapCursor(plain, NEW, { seal, required: true }), 'INVALID_QUERY').message,
    ).toContain('row filter');
    expectSluiceError(() => unwrapCursor(sealed, NEW), 'INVALID_QUERY');
    expectSluiceError(
      () => unwrapCursor(`${sealed.slice(0, -2)}AA`, NEW, { seal, required: true }),
      'INVALID_QUERY',
    );
  });
});
