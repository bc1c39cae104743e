/**
 * The console (headless Chromium) open on an endpoint whose rebuild waits for promotion (manual switch mode) while
 * its app-server is SIGKILLed and started again on the same port: without a reload the page goes "Not live", then
 * shows the new process's truth — the same green held, the same serving generation — and its Promote switches.
 */
import { createClient } from '@sluice/client';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { citiesEndpoint, openConsoleBrowser } from './console-browser.js';
import { localNode, startNodeProcess } from './helpers.js';

describe('a held green across an app-server restart, in the console', () => {
  it('shows the green still held after a SIGKILL and restart, without a reload, and its Promote switches', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-restart-held-');
    const { endpoint } = await citiesEndpoint(dir.path, 300, { switch: { mode: 'manual' } });
    let node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: ['cache: { gcGraceMs: 3600000 }', `endpoints: ${JSON.stringify([endpoint])}`].join('\n'),
    });
    try {
      const control = createClient({ controlUrl: node.url }).control;
      const short = (name: string) => name.slice('cities-'.length);
      await using browser = await openConsoleBrowser();
      const { page } = browser;
      await page.goto(`${node.url}/console#/endpoints`);
      const card = page.locator('article[data-endpoint="cities"]');
      await card.locator('dd[data-fact="records"]', { hasText: '300' }).waitFor({ timeout: 30_000 });
      const blue = (await control.endpoints())[0]!.servingCache!;
      await card.getByRole('button', { name: 'Rebuild' }).click();
      const heldSection = card.getByRole('region', { name: 'Held generations' });
      await heldSection.waitFor({ timeout: 30_000 });
      const green = (await control.endpoints())[0]!.held!.cache;

      await node.child.stop('SIGKILL');
      const status = page.locator('.page-head [role="status"]');
      await status.filter({ hasText: 'Not live' }).waitFor({ timeout: 15_000 });
      node = await startNodeProcess(node.spec);
      await status.filter({ hasText: /^Live$/ }).waitFor({ timeout: 30_000 });

      // The new process's truth: blue serves, the same green is held with its Promote.
      const after = (await control.endpoints())[0]!;
      expect({ phase: after.phase, serving: after.servingCache, held: after.held?.cache }).toEqual({
        phase: 'held',
        serving: blue,
        held: green,
      });
      await card.locator('.phase', { hasText: 'held' }).first().waitFor({ timeout: 10_000 });
      await heldSection.getByRole('button', { name: `Promote ${short(green)}` }).click();
      await card.getByRole('button', { name: `Yes, promote ${short(green)}` }).click();
      await card.locator('.timeline li[data-cause="promote"]').waitFor({ timeout: 30_000 });
      await heldSection.waitFor({ state: 'detached', timeout: 10_000 });
      expect((await control.endpoints())[0]!.servingCache).toBe(green);
      const listed = await control.generations('cities');
      expect(listed.history.map((h) => [h.from, h.to, h.cause])).toEqual([
        [blue, green, 'promote'],
        [null, blue, 'restart'],
      ]);
      expect(listed.generations.map((g) => [g.name, g.state])).toEqual([
        [green, 'serving'],
        [blue, 'retired'],
      ]);
    } finally {
      await node.child.stop('SIGKILL');
    }
  });
});
