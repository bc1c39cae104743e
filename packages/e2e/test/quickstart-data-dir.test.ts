import { chmod, mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, spawnWithoutFileCapabilities, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../src/paths.js';
import { runAsUser } from '../src/user-process.js';

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

  it("defect: a second pnpm start on a data directory in use reported the running quick start's log lines as its own crash", async () => {
    await using dir = await tempDir('sluice-e2e-start-twice-');
    const dataDir = join(dir.path, 'state');
    // The first quick start, running as the README leaves it.
    await using first = runAsUser('pnpm', ['start'], {
      cwd: repoRoot,
      env: {
        SLUICE_PORT: String(await freePort()),
        SLUICE_API_PORT: String(await freePort()),
        SLUICE_DATA_DIR: dataDir,
      },
    });
    await first.waitForLine(/^Press Ctrl-C to stop both servers\.$/, 600_000);
    const firstAppServer = Number((await readFile(join(dataDir, 'app-server.pid'), 'utf8')).trim());
    expect(firstAppServer).toBeGreaterThan(0);

    // The same command again in another terminal, on other ports: the data directory is the first one's.
    await using second = runAsUser('pnpm', ['start'], {
      cwd: repoRoot,
      env: {
        SLUICE_PORT: String(await freePort()),
        SLUICE_API_PORT: String(await freePort()),
        SLUICE_DATA_DIR: dataDir,
      },
    });
    expect((await second.exited).code).toBe(1);
    const report = second.output();
    expect(report).toContain('✖ the app-server exited unexpectedly (exit code 1).');
    expect(report).toContain(
      `sluice-app-server: CONFIG_INVALID: Another app-server (pid ${firstAppServer}) is using the data directory ${dataDir}`,
    );
    // The log file is shared with the running quick start: its lines are not this start's failure.
    expect(report).not.toContain(`"pid":${firstAppServer}`);
    expect(report).not.toMatch(/^\s+at /m);

    // The first one never noticed: it still stops cleanly.
    first.interrupt();
    expect((await first.exited).code).toBe(0);
  }, 900_000);
});
