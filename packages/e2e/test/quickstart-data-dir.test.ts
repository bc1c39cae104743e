import { chmod, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, spawnWithoutFileCapabilities, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../src/paths.js';

// `pnpm start` with a SLUICE_DATA_DIR its user may not write, as a new user meets it. Root passes every permission
// check, so the quick start runs as root without the capabilities that bypass them (`setpriv --bounding-set`): the
// directory's own mode decides, as for an ordinary user.

describe('pnpm start with a data directory it cannot use', () => {
  it('defect: an unwritable SLUICE_DATA_DIR made pnpm start print "pnpm start failed:" and a stack', async () => {
    await using dir = await tempDir('sluice-e2e-start-data-dir-');
    await chmod(dir.path, 0o755);
    const readOnly = join(dir.path, 'read-only');
    await mkdir(readOnly);
    await chmod(readOnly, 0o555);

    await using start = spawnWithoutFileCapabilities(
      process.execPath,
      [join(repoRoot, 'scripts/start.mjs')],
      {
        cwd: repoRoot,
        env: {
          SLUICE_PORT: String(await freePort()),
          SLUICE_API_PORT: String(await freePort()),
          SLUICE_DATA_DIR: readOnly,
        },
      },
    );
    expect((await start.exited).code).toBe(1);
    const output = start.output();
    expect(output).not.toContain('pnpm start failed');
    expect(output).not.toMatch(/^\s+at /m);
    expect(output.split('\n').filter((line) => line.startsWith('✖'))).toEqual([
      `✖ SLUICE_DATA_DIR: ${readOnly} cannot be used as the quick start's data directory: permission denied (EACCES); give this user write access to it, or set SLUICE_DATA_DIR to another directory`,
    ]);
  }, 600_000);
});
