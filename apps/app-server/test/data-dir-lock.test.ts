import { spawnSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnTs, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { DATA_DIR_LOCK_FILE } from '../src/data-dir-lock.js';

const CHILD = fileURLToPath(new URL('./fixtures/lock-child.ts', import.meta.url));

/** The pid of a process that has exited (a stale lock names it). */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']);
  return Number(child.stdout.toString());
}

describe('data directory lock', () => {
  it('defect 8: starters racing for a stale lock file never both take it over', async () => {
    const rounds = 8;
    const starters = 6;
    for (let round = 0; round < rounds; round++) {
      await using dir = await tempDir('sluice-lock-');
      await writeFile(join(dir.path, DATA_DIR_LOCK_FILE), `${deadPid()}\n`);
      const startAt = String(Date.now() + 2_500);
      const children = Array.from({ length: starters }, () => spawnTs(CHILD, [dir.path, '3000', startAt]));
      try {
        const lines = await Promise.all(
          children.map((child) => child.waitForLine(/^(LOCKED|REFUSED)/, 30_000)),
        );
        const locked = lines.filter((line) => line.startsWith('LOCKED'));
        expect(locked, `round ${round}: ${lines.join(' | ')}`).toHaveLength(1);
        for (const line of lines.filter((l) => l.startsWith('REFUSED')))
          expect(line).toMatch(/Another app-server \(pid \d+\) is using the data directory/);
      } finally {
        await Promise.allSettled(children.map((child) => child.stop('SIGKILL')));
      }
    }
  }, 120_000);
});
