import { stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { DataDirAccess, prepareDataDir } from './data-dir.js';

describe('prepareDataDir', () => {
  it('creates a missing data directory with its parents, and accepts an existing one', async () => {
    await using dir = await tempDir('sluice-http-data-dir-');
    const dataDir = join(dir.path, 'a', 'b');
    prepareDataDir(dataDir, DataDirAccess.READ_WRITE);
    expect((await stat(dataDir)).isDirectory()).toBe(true);
    prepareDataDir(dataDir, DataDirAccess.READ);
    prepareDataDir(dataDir, DataDirAccess.READ_WRITE);
  });

  it('refuses a file in its place with CONFIG_INVALID at dataDir, naming the file', async () => {
    await using dir = await tempDir('sluice-http-data-dir-');
    const file = join(dir.path, 'f');
    await writeFile(file, 'x');
    let thrown: unknown;
    try {
      prepareDataDir(join(file, 'below'), DataDirAccess.READ);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect(thrown).toMatchObject({
      code: 'CONFIG_INVALID',
      errors: [
        {
          path: 'dataDir',
          message: `${join(file, 'below')} cannot be used as a directory: ${file} is a file; point dataDir (SLUICE_DATA_DIR) at a directory`,
        },
      ],
    });
  });
});
