/**
 * Two operators on one endpoint in manual switch mode, one in the console (headless Chromium), one on the control
 * API: a rebuild requested while a green generation is held supersedes that green. What the console offers, and
 * what `GET /v1/endpoints/:name/generations` says, must then be the new green only — the superseded one is retired
 * (the pipeline feeds it no longer, garbage collection will delete it, and a promote never switches to it).
 */
import { createClient } from '@sluice/client';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { citiesEndpoint, openConsoleBrowser } from './console-browser.js';
import { localNode, startNodeProcess } from './helpers.js';

describe('a held generation superseded by a rebuild', () => {
  it('defect: a held green that a second Rebuild superseded stayed "held" with its own Promote button, which promoted the other generation', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-superseded-');
    const { endpoint } = await citiesEndpoint(dir.path, 300, { switch: { mode: 'manual' } });
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      // Retired generations kept for an hour: what the table says about them stays visible during the test.
      extraYaml: ['cache: { gcGraceMs: 3600000 }', `endpoints: ${JSON.stringify([endpoint])}`].join('\n'),
    });
    const control = createClient({ controlUrl: node.url }).control;
    const short = (name: string) => name.slice('cities-'.length);

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${node.url}/console#/endpoints`);
    const card = page.locator('article[data-endpoint="cities"]');
    await card.locator('dd[data-fact="records"]', { hasText: '300' }).waitFor({ timeout: 30_000 });
    const blue = (await control.endpoints())[0]!.servingCache!;

    // Operator A rebuilds from the console: the green is held (manual mode), with its Promote.
    await card.getByRole('button', { name: 'Rebuild' }).click();
    const heldSection = card.getByRole('region', { name: 'Held generations' });
    await heldSection.waitFor({ timeout: 30_000 });
    const first = (await control.endpoints())[0]!.held!.cache;
    await heldSection.getByRole('button', { name: `Promote ${short(first)}` }).waitFor();

    // Operator B rebuilds again over the API: a new green replaces the held one, and is held in its turn.
    expect((await control.rebuild('cities')).rebuild).toBe('started');
    const second = await waitFor(
      async () => {
        const held = (await control.endpoints())[0]!.held;
        return held && held.cache !== first ? held.cache : null;
      },
      { timeoutMs: 30_000, what: 'the second rebuild to be held' },
    );

    // The console offers the new green only: the superseded one is no longer held, so it has no Promote.
    await heldSection.getByRole('button', { name: `Promote ${short(second!)}` }).waitFor({ timeout: 10_000 });
    expect(await heldSection.locator('li').allTextContents()).toEqual([expect.stringContaining(second!)]);
    expect(await heldSection.getByRole('button', { name: `Promote ${short(first)}` }).count()).toBe(0);
    // The API says the same: the superseded green is retired, the new one held, blue serves.
    const listed = await control.generations('cities');
    const stateOf = (name: string) => listed.generations.find((g) => g.name === name)?.state;
    expect([stateOf(first), stateOf(second!), stateOf(blue)]).toEqual(['retired', 'held', 'serving']);
    expect(listed.generations.find((g) => g.name === first)?.retiredAt).not.toBeNull();
    await card
      .locator('tr[data-state="retired"] code', { hasText: short(first) })
      .waitFor({ timeout: 10_000 });

    // Promote (confirmed) switches to the green it names, and nothing stays held afterwards.
    await heldSection.getByRole('button', { name: `Promote ${short(second!)}` }).click();
    await card.getByRole('button', { name: `Yes, promote ${short(second!)}` }).click();
    await card.locator('.timeline li[data-cause="promote"]').waitFor({ timeout: 30_000 });
    await heldSection.waitFor({ state: 'detached', timeout: 10_000 });
    expect((await control.endpoints())[0]!.servingCache).toBe(second);
    const after = await control.generations('cities');
    expect(after.generations.filter((g) => g.state === 'held')).toEqual([]);
    expect(after.history[0]).toMatchObject({ from: blue, to: second, cause: 'promote' });
  });
});
