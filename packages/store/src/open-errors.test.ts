/**
 * Opening a PostgreSQL store that refuses who connects: a stable `STORE_UNAVAILABLE` naming why, as for an
 * unreachable server or a missing database — never `INTERNAL`.
 */
import { SluiceError } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { openStore } from './open.js';

describe('opening a PostgreSQL store', () => {
  it('defect: a role that does not exist failed as INTERNAL ("The transfer store failed (open)")', async () => {
    const err = await openStore('postgres://sluice_no_such_role@127.0.0.1:5432/test').then(
      async (store) => {
        await store[Symbol.asyncDispose]();
        return null;
      },
      (e: unknown) => e,
    );
    expect(SluiceError.isInstance(err)).toBe(true);
    expect({ code: (err as SluiceError).code, message: (err as Error).message }).toEqual({
      code: 'STORE_UNAVAILABLE',
      message: expect.stringContaining('role "sluice_no_such_role" does not exist'),
    });
  });
});
