/**
 * A `dataDir` the api-server cannot use, as an operator meets it (a real process): a path that is a file, a
 * directory its user may not read. Each must stop the start with exit 1 and one `CONFIG_INVALID` line naming
 * `dataDir`, the path and what to change — never a bare stack trace. The api-server only reads: a directory it may
 * read but not write (the app-server's, for another user) is served.
 *
 * Root passes every permission check, so the permission cases run the api-server as root without the
 * capabilities that bypass them (`setpriv --bounding-set`): the directory's own mode decides, as for a service user.
 */
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  type ChildHandle,
  freePort,
  spawnTs,
  spawnTsWithoutFileCapabilities,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { API_BIN } from './helpers.js';

function withoutFileCapabilities(configFile: string, cwd: string): ChildHandle {
  return spawnTsWithoutFileCapabilities(API_BIN, ['--config', configFile], { cwd });
}

async function configWith(dir: string, dataDir: string, port = 0): Promise<string> {
  const file = join(dir, `sluice-${Math.random().toString(36).slice(2)}.yaml`);
  await writeFile(file, [`api: { port: ${port} }`, `dataDir: "${dataDir}"`, 'logLevel: silent'].join('\n'));
  return file;
}

async function waitUntilReady(server: ChildHandle, port: number): Promise<void> {
  await waitFor(
    async () => {
      if (server.child.exitCode !== null) throw new Error(`api-server exited: ${server.output()}`);
      const res = await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => null);
      return res?.status === 200;
    },
    { timeoutMs: 30_000, what: `the api-server on port ${port} to be ready` },
  );
}

describe('a dataDir the api-server cannot use', () => {
  it('defect: a dataDir that is a file, or one the api-server may not read, crashed it with an fs stack naming no key', async () => {
    await using dir = await tempDir('sluice-api-data-dir-');
    await chmod(dir.path, 0o755);
    const file = join(dir.path, 'afile');
    await writeFile(file, 'not a directory\n');
    const onFile = spawnTs(API_BIN, ['--config', await configWith(dir.path, file)], { cwd: dir.path });
    expect((await onFile.exited).code).toBe(1);
    expect(onFile.output()).toBe(
      `sluice-api-server: CONFIG_INVALID: dataDir: ${file} cannot be used as a directory: ${file} is a file; point dataDir (SLUICE_DATA_DIR) at a directory`,
    );

    const locked = join(dir.path, 'locked');
    await mkdir(locked);
    await chmod(locked, 0o000);
    const unreadable = withoutFileCapabilities(await configWith(dir.path, locked), dir.path);
    expect((await unreadable.exited).code).toBe(1);
    expect(unreadable.output()).toBe(
      `sluice-api-server: CONFIG_INVALID: dataDir: ${locked} may not be read by this process: permission denied (EACCES); Sluice keeps its caches there: give this process's user access to it, or choose another dataDir (SLUICE_DATA_DIR)`,
    );
  }, 60_000);

  it('serves from a dataDir it may read but not write', async () => {
    await using dir = await tempDir('sluice-api-data-dir-');
    await chmod(dir.path, 0o755);
    const dataDir = join(dir.path, 'data');
    // The layout an app-server leaves (the alias table, the caches directory), made by a first start.
    const firstPort = await freePort();
    await using first = spawnTs(API_BIN, ['--config', await configWith(dir.path, dataDir, firstPort)], {
      cwd: dir.path,
    });
    await waitUntilReady(first, firstPort);
    expect(await first.stop('SIGTERM')).toEqual({ code: 0, signal: null });
    await chmod(dataDir, 0o555);

    const port = await freePort();
    await using reader = withoutFileCapabilities(await configWith(dir.path, dataDir, port), dir.path);
    await waitUntilReady(reader, port);
    expect(reader.child.exitCode).toBeNull();
  }, 60_000);
});
