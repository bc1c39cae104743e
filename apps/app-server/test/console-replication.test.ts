/**
 * The operator console in real headless Chromium over an endpoint that reads PostgreSQL logical replication (a
 * real server with `wal_level=logical`): rows the schema refuses while streaming show as skipped records with the
 * last reason, and Roll back — which the API always refuses for such an endpoint with 409 `CANNOT_RESUME` — is not
 * offered; the page says why instead. While a green is held, the card says whether the serving generation follows its
 * source (docs/generations.md), and why it stands once it cannot.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createClient } from '@sluice/client';
import { freePort, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openConsoleBrowser } from './console-browser.js';
import { dropSlotFromUnderIt, heldEndpointYaml, startHeldItems } from './held-replication.js';
import { call, localNode, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import {
  databaseWith,
  itemsOf,
  itemsStreaming,
  itemsTable,
  replicatedEndpointYaml,
} from './replication-node.js';

const postgres = logicalPostgresPerFile();
const BUILT = fileURLToPath(new URL('../dist/console/index.html', import.meta.url));

describe('the console over a replication endpoint', () => {
  it('defect: shows skipped records, and offers Roll back only where it can succeed', {
    timeout: 120_000,
  }, async () => {
    expect(existsSync(BUILT), 'the console is built (pnpm build)').toBe(true);
    await using dir = await tempDir('sluice-console-repl-');
    const url = await databaseWith(
      postgres(),
      'consolerepl',
      'CREATE TABLE items (id int PRIMARY KEY, v numeric)',
      'INSERT INTO items SELECT g, g FROM generate_series(1, 50) g',
    );
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      // Whole numbers only: a fractional value is refused and skipped while the endpoint streams on.
      extraYaml: replicatedEndpointYaml(url, {
        keepGenerations: true,
        fields: '{ id: integer, v: integer }',
      }),
    });
    const control = createClient({ controlUrl: node.url }).control;
    const blue = (await itemsStreaming(node, { records: 50 })).servingCache;
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

    await using browser = await openConsoleBrowser();
    const page = browser.page;
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
  });

  it('defect: an endpoint retrying its start while PostgreSQL is down showed an error badge as if it had failed for good', {
    timeout: 150_000,
  }, async () => {
    expect(existsSync(BUILT), 'the console is built (pnpm build)').toBe(true);
    await using dir = await tempDir('sluice-console-retrying-');
    const url = await itemsTable(postgres(), 'consoleretrying');
    await postgres().stop('fast');
    try {
      await using node = await startNodeProcess({
        ...localNode('h4', dir.path),
        extraYaml: heldEndpointYaml(url, await freePort()),
      });
      await using browser = await openConsoleBrowser();
      const page = browser.page;
      await page.goto(`${node.url}/console`);
      const card = page.locator('article[data-endpoint="items"]');
      await card.waitFor({ timeout: 30_000 });
      // Retrying by itself: when and why, counted down — no error banner, no "failed" badge.
      const retry = card.locator('[data-fact="retry"]');
      await retry.waitFor({ timeout: 30_000 });
      expect(await retry.textContent()).toMatch(
        /^retrying (in \d+ s|now): SOURCE_FAILED: .*failed attempts? so far/,
      );
      expect(await card.locator('.card-head .phase').textContent()).toBe('retrying');
      expect(await card.locator('.phase-failed').count()).toBe(0);
      expect(await card.locator('.error').count()).toBe(0);

      // PostgreSQL back: it starts by itself, and the card says it streams.
      await postgres().start();
      await card.locator('.card-head .phase', { hasText: 'streaming' }).waitFor({ timeout: 60_000 });
      await retry.waitFor({ state: 'detached', timeout: 10_000 });
      expect((await itemsOf(node)).records).toBe(100);
    } finally {
      await postgres().start();
    }
  });

  it('defect: the replication lag of an endpoint whose PostgreSQL is down was shown as if it were live, with no age', {
    timeout: 150_000,
  }, async () => {
    expect(existsSync(BUILT), 'the console is built (pnpm build)').toBe(true);
    await using dir = await tempDir('sluice-console-lag-age-');
    const url = await itemsTable(postgres(), 'consolelagage');
    await using node = await startNodeProcess({
      ...localNode('h6', dir.path),
      extraYaml: replicatedEndpointYaml(url),
    });
    await itemsStreaming(node, { records: 100 });
    await using browser = await openConsoleBrowser();
    const page = browser.page;
    await page.goto(`${node.url}/console`);
    const card = page.locator('article[data-endpoint="items"]');
    await card.locator('.card-head .phase', { hasText: 'streaming' }).waitFor({ timeout: 30_000 });
    // The card's Lag: its figures, in bytes of WAL and seconds.
    const lag = card.locator('.facts > div', { has: page.locator('dt', { hasText: /^Lag$/ }) }).locator('dd');
    await card
      .locator('.facts > div', { has: page.locator('dt', { hasText: /^Lag$/ }), hasText: 'bytes of WAL' })
      .waitFor({ timeout: 30_000 });
    // Live figures: no age said.
    const age = card.locator('[data-fact="lag-age"]');
    expect(await age.count()).toBe(0);

    await postgres().stop('fast');
    try {
      // PostgreSQL down: the figures are the last it answered with, and the card says how old they are.
      await age.waitFor({ timeout: 30_000 });
      const shown = await waitFor(
        async () => {
          const text = (await age.textContent()) ?? '';
          const seconds = Number(/^as of (\d+) s ago/.exec(text)?.[1] ?? Number.NaN);
          return seconds >= 8 ? { text, seconds } : null;
        },
        { timeoutMs: 30_000, what: 'the age of the lag figures to be shown growing' },
      );
      const items = await itemsOf(node);
      const observedAt = (items.replication as { observedAt?: string | null } | null)?.observedAt;
      expect(observedAt, 'the API says when the figures were measured').toBeTruthy();
      // The age shown is the API's `observedAt` seen from now (the page ticks on its own, a second at a time).
      const apiAge = (Date.now() - Date.parse(observedAt!)) / 1000;
      expect(Math.abs(shown.seconds - apiAge)).toBeLessThanOrEqual(3);
      expect(shown.text).toContain('last read from PostgreSQL at');
      // The figures themselves are still on the card beside their age.
      expect(await lag.textContent()).toMatch(/bytes of WAL/);
    } finally {
      await postgres().start();
    }

    // PostgreSQL back: the endpoint streams again and its figures are live — the age goes.
    await card.locator('.card-head .phase', { hasText: 'streaming' }).waitFor({ timeout: 60_000 });
    await age.waitFor({ state: 'detached', timeout: 30_000 });
  });

  it('shows whether the serving generation follows its source while a green is held, and why it stands', {
    timeout: 150_000,
  }, async () => {
    expect(existsSync(BUILT), 'the console is built (pnpm build)').toBe(true);
    await using dir = await tempDir('sluice-console-follower-');
    await using started = await startHeldItems(postgres(), 'consolefollower', 'h3', dir.path);
    const { url, node, blue, green } = started;
    await using browser = await openConsoleBrowser();
    await sql(url, "INSERT INTO items VALUES (101, 101, 'while held')");
    await waitFor(
      async () => {
        const items = await itemsOf(node);
        return items.follower?.phase === 'following' && items.follower.lastCommit ? items.follower : null;
      },
      { timeoutMs: 30_000, what: 'the serving generation to follow' },
    );
    const page = browser.page;
    await page.goto(`${node.url}/console`);
    const card = page.locator('article[data-endpoint="items"]');
    await card.waitFor({ timeout: 30_000 });
    const fact = card.locator('[data-fact="follower"]');
    await card.locator('[data-fact="follower"][data-phase="following"]').waitFor({ timeout: 10_000 });
    const shown = await fact.textContent();
    expect(shown).toContain('follows its source through its own slot');
    expect(shown).toMatch(/\d+ records written/);
    expect(await card.locator('dt', { hasText: `while ${green} is fed` }).count()).toBe(1);

    // Its slot dropped from under it: the card says it stands, and why.
    await dropSlotFromUnderIt(url, 'sluice_h3_items_source');
    await card.locator('[data-fact="follower"][data-phase="standing"]').waitFor({ timeout: 60_000 });
    const standing = await itemsOf(node);
    expect(standing.follower).toMatchObject({ cache: blue, phase: 'standing' });
    const text = await fact.textContent();
    expect(text).toContain('stands at its last commit');
    expect(text).toContain(standing.follower!.reason!);
    expect(await fact.locator('.warning').count()).toBe(1);

    // Promoted, the green serves itself: nothing follows for it, and the fact goes.
    expect((await call(`${node.url}/v1/endpoints/items/promote`, { method: 'POST' })).status).toBe(200);
    await fact.waitFor({ state: 'detached', timeout: 20_000 });
  });
});
