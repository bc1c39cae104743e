/**
 * A rollback confirmed from what the operator saw, while the endpoint moved on under the page: the request must
 * carry what the operator saw serving, and the server must refuse it — nothing moving — once another generation
 * serves. Over the control API, and from the console in headless Chromium with its endpoint stream held back by a
 * proxy (the page still "Live", its picture older than the server's).
 */
import { createClient } from '@sluice/client';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { citiesEndpoint, openConsoleBrowser } from './console-browser.js';
import { call, localNode, startNodeProcess } from './helpers.js';
import { startStreamHoldProxy } from './stream-hold-proxy.js';

/** Rebuilds `cities` (automatic switch) and waits until the new generation serves; returns its name. */
async function rebuildAndSwitch(url: string): Promise<string> {
  const control = createClient({ controlUrl: url }).control;
  const before = (await control.endpoints())[0]!.servingCache;
  expect((await control.rebuild('cities')).rebuild).toBe('started');
  return (await waitFor(
    async () => {
      const [cities] = await control.endpoints();
      return cities!.servingCache !== before && cities!.building === null ? cities!.servingCache : null;
    },
    { timeoutMs: 30_000, what: 'the rebuild to switch' },
  ))!;
}

async function startCitiesNode(dir: string) {
  const { endpoint } = await citiesEndpoint(dir, 300);
  return startNodeProcess({
    ...localNode('h1', dir),
    // Retired generations kept for an hour: every one the test names stays a rollback target.
    extraYaml: ['cache: { gcGraceMs: 3600000 }', `endpoints: ${JSON.stringify([endpoint])}`].join('\n'),
  });
}

describe('a rollback from a picture that changed since', () => {
  it('defect: the steering API had no precondition on the generation the operator saw serving — a rollback "from" it was refused as an unknown key, and one without moved whatever served now', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-stale-rollback-api-');
    await using node = await startCitiesNode(dir.path);
    const control = createClient({ controlUrl: node.url }).control;
    const first = await waitFor(async () => (await control.endpoints())[0]?.servingCache ?? null, {
      timeoutMs: 30_000,
      what: 'the first generation to serve',
    });
    const second = await rebuildAndSwitch(node.url);
    // What the operator saw: `second` serving, `first` before it. Then another operator rebuilds: `third` serves.
    const third = await rebuildAndSwitch(node.url);
    const historyBefore = (await control.generations('cities')).history;

    const stale = await call(`${node.url}/v1/endpoints/cities/rollback`, {
      method: 'POST',
      json: { to: first, from: second },
    });
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({
      code: 'GENERATION_NOT_SERVING',
      endpoint: 'cities',
      generation: second,
      serving: third,
    });
    expect(stale.body.detail).toContain(third!);
    // Nothing moved: the alias, its history and the generations' states are as they were.
    expect((await control.endpoints())[0]!.servingCache).toBe(third);
    expect((await control.generations('cities')).history).toEqual(historyBefore);

    // What serves now, named: the rollback is done, and repeating it changes nothing.
    const done = await call(`${node.url}/v1/endpoints/cities/rollback`, {
      method: 'POST',
      json: { to: second, from: third },
    });
    expect(done.status).toBe(200);
    expect(done.body).toMatchObject({ from: third, to: second, cause: 'rollback', changed: true });
    const again = await call(`${node.url}/v1/endpoints/cities/rollback`, {
      method: 'POST',
      json: { to: second, from: third },
    });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ to: second, changed: false });
    expect((await control.generations('cities')).history).toHaveLength(historyBefore.length + 1);
    // A name that is no generation name is a 400 at its key.
    const bad = await call(`${node.url}/v1/endpoints/cities/rollback`, {
      method: 'POST',
      json: { from: 'not a name!' },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toEqual([expect.objectContaining({ path: 'from' })]);
  });

  it('defect: Roll back confirmed on a page whose picture was behind the server rolled back from a generation the page never showed', {
    timeout: 150_000,
  }, async () => {
    await using dir = await tempDir('sluice-stale-rollback-console-');
    await using node = await startCitiesNode(dir.path);
    const control = createClient({ controlUrl: node.url }).control;
    const first = await waitFor(async () => (await control.endpoints())[0]?.servingCache ?? null, {
      timeoutMs: 30_000,
      what: 'the first generation to serve',
    });
    const second = await rebuildAndSwitch(node.url);
    const short = (name: string) => name.slice('cities-'.length);

    await using proxy = await startStreamHoldProxy(node.port);
    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${proxy.url}/console#/endpoints`);
    const card = page.locator('article[data-endpoint="cities"]');
    await card
      .locator('.timeline li[data-cause="rebuild"] code', { hasText: short(second) })
      .first()
      .waitFor({
        timeout: 30_000,
      });
    // The operator asks to roll back: "Serve <first> again instead of <second>?"
    await card.getByRole('button', { name: `Roll back to ${short(first!)}` }).click();
    const confirm = card.getByRole('group', { name: 'Confirm Roll back' });
    await confirm.waitFor({ timeout: 5_000 });
    expect(await confirm.textContent()).toContain(`instead of ${short(second)}`);

    // Meanwhile another operator rebuilds; the page's stream is behind (held), so it still shows `second` serving.
    expect(proxy.streams()).toBe(1);
    proxy.hold();
    const third = await rebuildAndSwitch(node.url);
    expect(await page.locator('.page-head [role="status"]').textContent()).toBe('Live');
    expect(await confirm.textContent()).toContain(`instead of ${short(second)}`);

    // Confirmed from the stale picture: refused, and the page says why; nothing moves.
    await card.getByRole('button', { name: `Yes, roll back to ${short(first!)}` }).click();
    const outcome = card.locator('.outcome');
    await outcome.filter({ hasText: /failed|Rolled back/ }).waitFor({ timeout: 30_000 });
    expect(await outcome.textContent()).toContain('GENERATION_NOT_SERVING');
    expect((await control.endpoints())[0]!.servingCache).toBe(third);
    expect((await control.generations('cities')).history[0]).toMatchObject({
      from: second,
      to: third,
      cause: 'rebuild',
    });
    expect(browser.actions).toEqual(['POST /v1/endpoints/cities/rollback']);

    // The stream catches up: the page shows what serves now, and offers to roll back to what served before it.
    proxy.release();
    await card.getByRole('button', { name: `Roll back to ${short(second)}` }).waitFor({ timeout: 30_000 });
    await card.getByRole('button', { name: `Roll back to ${short(second)}` }).click();
    await card.getByRole('button', { name: `Yes, roll back to ${short(second)}` }).click();
    await card.locator('.timeline li[data-cause="rollback"]').waitFor({ timeout: 30_000 });
    expect((await control.endpoints())[0]!.servingCache).toBe(second);
  });
});
