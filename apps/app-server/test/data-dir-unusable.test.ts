/**
 * A `dataDir` the app-server cannot use, as an operator meets it (a real process): a path that is a file or lies
 * below one, a directory its user may not write, one it may not create. Each must stop the start with exit 1 and
 * one `CONFIG_INVALID` line naming `dataDir`, the path and what to change — never a bare stack trace.
 *
 * Root passes every permission check, so the permission cases run the app-server as root without the
 * capabilities that bypass them (`setpriv --bounding-set`): the directory's own mode decides, as for a service user.
 */
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type ChildHandle, spawnTs, spawnTsWithoutFileCapabilities, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIN } from './helpers.js';

function withoutFileCapabilities(configFile: string, cwd: string): ChildHandle {
  return spawnTsWithoutFileCapabilities(BIN, ['--config', configFile], { cwd });
}

async function configWith(dir: string, dataDir: string): Promise<string> {
  const file = join(dir, `sluice-${Math.random().toString(36).slice(2)}.yaml`);
  await writeFile(
    file,
    [
      'node: { id: d1, port: 0 }',
      `store: "sqlite:${join(dir, 'store', 'store.db')}"`,
      `dataDir: "${dataDir}"`,
      'logLevel: silent',
    ].join('\n'),
  );
  return file;
}

describe('a dataDir the app-server cannot use', () => {
  it('defect: a dataDir that is a file, or lies below one, crashed the app-server with an fs stack naming no key', async () => {
    await using dir = await tempDir('sluice-data-dir-');
    const file = join(dir.path, 'afile');
    await writeFile(file, 'not a directory\n');
    for (const dataDir of [file, join(file, 'caches')]) {
      const child = spawnTs(BIN, ['--config', await configWith(dir.path, dataDir)], { cwd: dir.path });
      expect({ dataDir, code: (await child.exited).code }).toEqual({ dataDir, code: 1 });
      expect(child.output()).toBe(
        `sluice-app-server: CONFIG_INVALID: dataDir: ${dataDir} cannot be used as a directory: ${file} is a file; point dataDir (SLUICE_DATA_DIR) at a directory`,
      );
    }
  }, 60_000);

  it('defect: a dataDir the app-server may not write, or not create, crashed it with EACCES and a stack naming no key', async () => {
    await using dir = await tempDir('sluice-data-dir-');
    await chmod(dir.path, 0o755);
    const readOnly = join(dir.path, 'read-only');
    await mkdir(readOnly);
    await chmod(readOnly, 0o555);

    const unwritable = withoutFileCapabilities(await configWith(dir.path, readOnly), dir.path);
    expect((await unwritable.exited).code).toBe(1);
    expect(unwritable.output()).toBe(
      `sluice-app-server: CONFIG_INVALID: dataDir: ${readOnly} may not be read and written by this process: permission denied (EACCES); Sluice keeps its caches there: give this process's user access to it, or choose another dataDir (SLUICE_DATA_DIR)`,
    );

    const below = join(readOnly, 'sluice');
    const uncreatable = withoutFileCapabilities(await configWith(dir.path, below), dir.path);
    expect((await uncreatable.exited).code).toBe(1);
    expect(uncreatable.output()).toBe(
      `sluice-app-server: CONFIG_INVALID: dataDir: ${below} does not exist and cannot be created: permission denied (EACCES); create it for this process's user, or choose another dataDir (SLUICE_DATA_DIR)`,
    );
  }, 60_000);
});
