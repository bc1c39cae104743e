/**
 * The operator console in real headless Chromium over an endpoint that reads PostgreSQL logical replication (a
 * real server with `wal_level=logical`): rows the schema refuses while streaming show as skipped records with the
 * last reason, and Roll back — which the API always refuses for such an endpoint with 409 `CANNOT_RESUME` — is not
 * offered; the page says why instead.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createClient } from '@sluice/client';
import { chromiumLaunchOptions, sql, tempDir, waitFor } from '@sluice/testkit';
import { chromium } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { call, localNode, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';

const postgres = logicalPostgresPerFile();
const BUILT = fileURLToPath(new URL('../dist/console/index.html', import.meta.url));

describe('the console over a replication endpoint', () => {
  it('defect: shows skipped records, and offers Roll back only where it can succeed', {
    timeout: 120_000,
  }, async () => {
    expect(existsSync(BUILT), 'the console is built (pnpm build)').toBe(true);
    await using dir = await tempDir('sluice-console-repl-');
    const url = await postgres().createDatabase('consolerepl');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v numeric)');
    await sql(url, 'INSERT INTO items SELECT g, g FROM generate_series(1, 50) g');
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: [
        'cache: { gcGraceMs: 3600000 }',
        'connections:',
        `  db: { type: postgres, url: "${url}" }`,
        'endpoints:',
        '  - name: items',
        '    source: { type: postgres, connection: db, table: items }',
        '    primaryKey: [id]',
        // Whole numbers only: a fractional value is refused and skipped while the endpoint streams on.
        '    fields: { id: integer, v: integer }',
      ].join('\n'),
    });
    const control = createClient({ controlUrl: node.url }).control;
    const blue = await waitFor(
      async () => {
        const [items] = await control.endpoints();
        return items?.records === 50 && items.replication?.committedLsn ? items.servingCache : null;
      },
      { timeoutMs: 60_000, what: 'items to stream' },
    );
    // A rebuild, so the timeline has a switch from a retained generation (what Roll back would go back to).
    expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const green = await waitFor(
      async () => {
        const [items] = await control.endpoints();
        return items && items.servingCache !== blue && !items.buildingCache && items.records === 50
          ? items.servingCache
          : null;
      },
      { timeoutMs: 60_000, what: 'the rebuilt generation to serve' },
    );
    await sql(url, 'UPDATE items SET v = 2.5 WHERE id = 7');
    const skipped = await waitFor(
      async () => {
        const [items] = await control.endpoints();
        return items && items.badRecords.count >= 1 ? items : null;
      },
      { timeoutMs: 30_000, what: 'the fractional update to be skipped' },
    );
    expect(skipped.badRecords.last?.reason).toBeTruthy();

    const profile = await tempDir('sluice-console-chromium-');
    const context = await chromium.launchPersistentContext(profile.path, {
      ...chromiumLaunchOptions(),
      headless: true,
    });
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      await page.goto(`${node.url}/console`);
      const card = page.locator('article[data-endpoint="items"]');
      await card.waitFor({ timeout: 30_000 });
      await card.locator('code', { hasText: green! }).first().waitFor();
      // The skipped record is on the card: its count and the last reason.
      await card.locator('[data-fact="bad-records"]', { hasText: String(skipped.badRecords.count) }).waitFor({
        timeout: 10_000,
      });
      expect(await card.textContent()).toContain(skipped.badRecords.last!.reason);
      // The replaced generation kept following until the switch and keeps its slot while retained
      // (docs/generations.md): Roll back is offered, and the API does it.
      await card.locator('.timeline li[data-cause="rebuild"]').waitFor();
      await card.getByRole('button', { name: /Roll back/ }).waitFor({ timeout: 10_000 });
      const rolledBack = await call(`${node.url}/v1/endpoints/items/rollback`, { method: 'POST' });
      expect(rolledBack.body).toMatchObject({ from: green, to: blue, cause: 'rollback', changed: true });
      await card.locator('.timeline li[data-cause="rollback"]').waitFor({ timeout: 10_000 });
    } finally {
      await context.close();
      await profile[Symbol.asyncDispose]();
    }
  });
});
