/**
 * The embedded SQLite store is single-node: one app-server per store file. A second one pointed at the same file
 * (another data directory and port, the same `store:`) is refused at start; the lock dies with its process, so a
 * SIGKILLed holder never leaves it stale.
 */
import { mkdir, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, startNodeProcess } from './helpers.js';

describe('one app-server per SQLite store file', { timeout: 90_000 }, () => {
  it('defect: a second app-server on the same SQLite store file is refused at start, with a clear message and exit 1', async () => {
    await using dir = await tempDir('sluice-store-lock-');
    const store = `sqlite:${join(dir.path, 'shared', 'store.db')}`;
    await using first = await startNodeProcess({
      nodeId: 'a',
      dir: join(dir.path, 'a'),
      store,
      roots: [dir.path],
    });
    const refused =
      /exited \(1\)[\s\S]*CONFIG_INVALID: Another app-server is using the SQLite store .*store\.db/;
    await expect(
      startNodeProcess({ nodeId: 'b', dir: join(dir.path, 'b'), store, roots: [dir.path] }),
    ).rejects.toThrow(refused);
    // The same file reached through a symlinked directory is the same store.
    await symlink(join(dir.path, 'shared'), join(dir.path, 'alias'));
    await expect(
      startNodeProcess({
        nodeId: 'c',
        dir: join(dir.path, 'c'),
        store: `sqlite:${join(dir.path, 'alias', 'store.db')}`,
        roots: [dir.path],
      }),
    ).rejects.toThrow(refused);
    // The first one is untouched.
    expect((await call(`${first.url}/readyz`)).status).toBe(200);
  });

  it('defect: the SQLite store lock of a SIGKILLed app-server is never stale: the next one starts at once', async () => {
    await using dir = await tempDir('sluice-store-lock-kill-');
    const store = `sqlite:${join(dir.path, 'shared', 'store.db')}`;
    await mkdir(join(dir.path, 'shared'));
    const first = await startNodeProcess({ nodeId: 'a', dir: join(dir.path, 'a'), store, roots: [dir.path] });
    await first.child.stop('SIGKILL');
    await using second = await startNodeProcess({
      nodeId: 'b',
      dir: join(dir.path, 'b'),
      store,
      roots: [dir.path],
    });
    expect((await call(`${second.url}/readyz`)).status).toBe(200);
    // And it holds the file in turn.
    await expect(
      startNodeProcess({ nodeId: 'c', dir: join(dir.path, 'c'), store, roots: [dir.path] }),
    ).rejects.toThrow(/CONFIG_INVALID: Another app-server is using the SQLite store/);
  });
});
