/**
 * An operator who rolled back from the console (headless Chromium) and wants the newer generation back: the
 * generation rolled back from is still retained and the control API can return to it (`rollback {to, from}`), so the
 * timeline offers Roll back to it — the only way back short of a new rebuild, since nothing is held to promote.
 */
import { createClient } from '@sluice/client';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { citiesEndpoint, openConsoleBrowser } from './console-browser.js';
import { localNode, startNodeProcess } from './helpers.js';

describe('undoing a rollback from the console', () => {
  it('defect: after a Roll back the timeline offered no way back to the generation rolled back from, though the API can go back to it', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-undo-');
    const { endpoint } = await citiesEndpoint(dir.path, 300);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: ['cache: { gcGraceMs: 3600000 }', `endpoints: ${JSON.stringify([endpoint])}`].join('\n'),
    });
    const control = createClient({ controlUrl: node.url }).control;
    const short = (name: string) => name.slice('cities-'.length);
    const blue = await waitFor(
      async () => {
        const [cities] = await control.endpoints();
        return cities?.records === 300 ? cities.servingCache : null;
      },
      { timeoutMs: 30_000, what: 'the first generation to serve' },
    );
    expect((await control.rebuild('cities')).rebuild).toBe('started');
    const green = await waitFor(
      async () => {
        const [cities] = await control.endpoints();
        return cities && cities.servingCache !== blue && !cities.buildingCache && cities.records === 300
          ? cities.servingCache
          : null;
      },
      { timeoutMs: 30_000, what: 'the rebuild to switch' },
    );

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    const sent: unknown[] = [];
    page.on('request', (request) => {
      if (request.method() === 'POST' && request.url().endsWith('/rollback'))
        sent.push(request.postDataJSON());
    });
    await page.goto(`${node.url}/console#/endpoints`);
    const card = page.locator('article[data-endpoint="cities"]');
    await card.locator('.timeline li[data-cause="rebuild"]').waitFor({ timeout: 30_000 });

    // Roll back to blue (confirmed).
    await card.getByRole('button', { name: `Roll back to ${short(blue!)}` }).click();
    await card.getByRole('button', { name: `Yes, roll back to ${short(blue!)}` }).click();
    await card.locator('.timeline li[data-cause="rollback"]').waitFor({ timeout: 30_000 });
    expect((await control.endpoints())[0]!.servingCache).toBe(blue);

    // Green is retained: the timeline offers going back to it, and the confirmed action does so.
    await card.getByRole('button', { name: `Roll back to ${short(green!)}` }).waitFor({ timeout: 10_000 });
    await card.getByRole('button', { name: `Roll back to ${short(green!)}` }).click();
    await card.getByRole('button', { name: `Yes, roll back to ${short(green!)}` }).click();
    await card.locator('.timeline li[data-cause="rollback"]').nth(1).waitFor({ timeout: 30_000 });
    expect((await control.endpoints())[0]!.servingCache).toBe(green);
    const listed = await control.generations('cities');
    expect(listed.history.map((h) => [h.from, h.to, h.cause])).toEqual([
      [blue, green, 'rollback'],
      [green, blue, 'rollback'],
      [blue, green, 'rebuild'],
      [null, blue, 'restart'],
    ]);
    // Each confirmed action sent what it showed: from the generation serving, to the one named.
    expect(sent).toEqual([
      { to: blue, from: green },
      { to: green, from: blue },
    ]);
    await card
      .getByRole('status')
      .filter({ hasText: `serves ${short(green!)} again` })
      .waitFor();
  });
});
