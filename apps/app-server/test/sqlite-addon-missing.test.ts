/**
 * What an operator sees when better-sqlite3's native addon was never built (pnpm 10+ runs no dependency's build
 * script until the project approves it): a real app-server process on the embedded SQLite store, the addon made
 * unloadable by a preloaded shim (fixtures/no-sqlite-addon.cjs) so the real `bindings` package fails as it does then.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIN } from './helpers.js';

const NO_ADDON = fileURLToPath(new URL('./fixtures/no-sqlite-addon.cjs', import.meta.url));

describe('the SQLite store without its native addon', () => {
  it('defect: a missing better-sqlite3 addon stopped the start as STORE_UNAVAILABLE (the outage code), not as the install problem it is', async () => {
    await using dir = await tempDir('sluice-no-addon-');
    const config = join(dir.path, 'sluice.yaml');
    await writeFile(
      config,
      `node: { id: n1, port: ${await freePort()} }\nstore: "sqlite:./store.db"\ndataDir: ./data\nlogLevel: warn\n`,
    );
    await using child = spawnTs(BIN, ['--config', config], {
      cwd: dir.path,
      nodeArgs: ['--require', NO_ADDON],
    });
    const exit = await child.exited;
    const output = child.output();
    expect(exit.code, output).toBe(1);
    // A setup to fix, named with the fix, not an outage to wait out.
    expect(output).toContain('sluice-app-server: CONFIG_INVALID: ');
    expect(output).not.toContain('STORE_UNAVAILABLE');
    expect(output).toContain("better-sqlite3's native addon");
    expect(output).toContain('pnpm approve-builds');
    expect(output).toContain('Could not locate the bindings file');
  }, 90_000);
});
