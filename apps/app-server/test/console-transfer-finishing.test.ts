/**
 * The operator console in real headless Chromium shows a transfer's finishing mark (`finishing: true` in
 * `GET /v1/transfers/:id`, docs/fencing.md § Finishing holds the record): the owner passed its fenced finishing step
 * and publishes, so a terminate or takeover waits for its lease. Two real app-servers on a PostgreSQL store, the
 * owner cut off from NATS at its finishing step (partitioned-owner.ts, finishing-hold.ts: an owner that stayed
 * reachable takes the shortcut and writes no mark); its finishing write commits, and its final write (`COMPLETED`)
 * then waits in the store on an advisory lock the test holds (store-gates.ts), so the record stays finishing for as
 * long as the test looks at it through the other node's console.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromiumLaunchOptions, createTestDatabase, tempDir, waitFor } from '@sluice/testkit';
import { chromium } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import {
  FINISHING_WRITE_WAITS,
  HOLD_FINISHING,
  HOLD_UPDATES,
  partitionedAtFinishing,
} from './finishing-hold.js';
import { call, waitForState } from './helpers.js';
import { startPartitionedPair } from './partitioned-owner.js';
import { openStoreGates } from './store-gates.js';

const BUILT = fileURLToPath(new URL('../dist/console/index.html', import.meta.url));
/** Advisory lock key the test holds: the owner's COMPLETED write waits on it, the record's row locked. */
const HOLD_COMPLETED = 41;

describe('the console and a finishing transfer', () => {
  it('shows the finishing mark in the list and on the transfer, and drops it once the record is final', {
    timeout: 120_000,
  }, async () => {
    expect(existsSync(BUILT), 'the console is built (pnpm build)').toBe(true);
    await using storeDb = await createTestDatabase('sluice_console_finishing');
    await using dir = await tempDir('sluice-console-finishing-');
    await using pair = await startPartitionedPair(dir.path, storeDb.url);
    const { other, files } = pair;
    await using gates = await openStoreGates(storeDb, {
      rowHolds: `${FINISHING_WRITE_WAITS}
        IF NEW.state = 'COMPLETED' THEN PERFORM pg_advisory_xact_lock_shared(${HOLD_COMPLETED}); END IF;`,
      updateGate: HOLD_UPDATES,
    });
    await gates.hold(HOLD_FINISHING, HOLD_COMPLETED);
    const id = 'finishing-shown';
    await partitionedAtFinishing(pair, gates, id, join(files, 'out.jsonl'));
    // The finishing write commits; the owner publishes and its COMPLETED write waits.
    await gates.release(HOLD_FINISHING);
    await waitFor(() => gates.waitingOnAdvisory(HOLD_COMPLETED), {
      timeoutMs: 30_000,
      intervalMs: 20,
      what: "the owner's COMPLETED write to wait",
    });
    expect((await call(`${other.url}/v1/transfers/${id}`)).body).toMatchObject({
      state: 'IN_PROGRESS',
      finishing: true,
    });

    const profile = await tempDir('sluice-console-chromium-');
    const context = await chromium.launchPersistentContext(profile.path, {
      ...chromiumLaunchOptions(),
      headless: true,
    });
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto(`${other.url}/console#/transfers`);
      const row = page.locator(`tr[data-transfer="${id}"]`);
      await row.waitFor({ timeout: 30_000 });
      await row.locator('[data-fact="finishing"]', { hasText: 'finishing' }).waitFor({ timeout: 10_000 });
      expect(await row.locator('.state-IN_PROGRESS').textContent()).toBe('IN_PROGRESS');

      await page.goto(`${other.url}/console#/transfers/${id}`);
      const state = page.locator('[data-fact="state"]');
      await state.waitFor({ timeout: 10_000 });
      expect(await state.textContent()).toBe('IN_PROGRESS');
      const mark = page.locator('[data-fact="finishing"]');
      await mark.waitFor({ timeout: 10_000 });
      expect(await mark.textContent()).toBe('finishing');
      expect(await page.locator('body').textContent()).toContain('A terminate waits for its lease to expire');

      // Released: the record turns final, and the mark goes with the next refresh.
      await gates.release(HOLD_COMPLETED);
      expect(await waitForState(other.url, id, 'COMPLETED')).toMatchObject({ finishing: false });
      await page.locator('[data-fact="state"]', { hasText: 'COMPLETED' }).waitFor({ timeout: 10_000 });
      expect(await mark.count()).toBe(0);
    } finally {
      await gates.release(HOLD_FINISHING, HOLD_COMPLETED).catch(() => {});
      await context.close();
      await profile[Symbol.asyncDispose]();
    }
  });
});
