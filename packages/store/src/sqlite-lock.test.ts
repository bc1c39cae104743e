/**
 * `openStore(url, { exclusive: true })` claims a SQLite file for one holder (an app-server): another claim is
 * refused with `CONFIG_INVALID`, whatever spelling of the path it uses; the claim ends with `close()` (and with the
 * process: it is SQLite's own file lock — the SIGKILL case runs real processes in apps/app-server/test/store-lock.test.ts).
 */
import { symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { expectSluiceError, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openStore } from './open.js';

describe('exclusive SQLite stores', () => {
  it('refuses a second exclusive open of one file until the first closes; plain opens still work', async () => {
    await using dir = await tempDir('sluice-store-lock-');
    const url = `sqlite:${join(dir.path, 'db', 'store.db')}`;
    const first = await openStore(url, { exclusive: true });
    try {
      const err = await expectSluiceError(openStore(url, { exclusive: true }), 'CONFIG_INVALID');
      expect(err.message).toMatch(/Another app-server is using the SQLite store .*store\.db .*single-node/);
      // Another spelling of the same file is the same store.
      await symlink(join(dir.path, 'db'), join(dir.path, 'alias'));
      await expect(
        openStore(`sqlite:${join(dir.path, 'alias', 'store.db')}`, { exclusive: true }),
      ).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
      // A tool reading the file is not refused.
      await using reader = await openStore(url);
      await reader.ping();
      await first.ping();
    } finally {
      await first.close();
    }
    await using next = await openStore(url, { exclusive: true });
    await next.ping();
  });
});
