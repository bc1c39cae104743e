/**
 * The Endpoints page when the app-server refuses its endpoint stream with 429 (`control.maxStreamsPerClient`: the
 * operator's other tabs and scripts hold this client's streams): the page must say why — the operator can act on it,
 * closing a tab — and go live by itself once a slot is free. Headless Chromium against a real app-server process.
 */
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { citiesEndpoint, openConsoleBrowser } from './console-browser.js';
import { localNode, startNodeProcess } from './helpers.js';

describe('the Endpoints page while its stream is refused', () => {
  it('defect: a stream refused 429 QUEUE_FULL showed only "refused the endpoint stream", not why nor what to do', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-stream-refused-');
    const { endpoint } = await citiesEndpoint(dir.path, 300);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      // One stream per client (without auth the client is the remote address: this test and its browser are one).
      extraYaml: ['control: { maxStreamsPerClient: 1 }', `endpoints: ${JSON.stringify([endpoint])}`].join(
        '\n',
      ),
    });

    // Another tab (here a script) of the same client holds the one stream it may open.
    const other = new AbortController();
    const held = await fetch(`${node.url}/v1/endpoints/stream`, { signal: other.signal });
    expect(held.status).toBe(200);
    const reading = held.body!.getReader();
    void (async () => {
      for (;;) if ((await reading.read().catch(() => ({ done: true }))).done) return;
    })();

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${node.url}/console#/endpoints`);
    const status = page.locator('.page-head [role="status"]');
    await status.filter({ hasText: /^Not live/ }).waitFor({ timeout: 30_000 });
    const said = await status.textContent();
    // Why, in the server's words (its code, the bound reached and what to do), and that it goes on trying.
    expect(said).toContain('QUEUE_FULL');
    expect(said).toContain('as many as one client may; close one');
    expect(said).toContain('reconnecting');

    // The other stream closes: the page goes live by itself and shows the endpoint.
    other.abort();
    await status.filter({ hasText: /^Live$/ }).waitFor({ timeout: 30_000 });
    await page
      .locator('article[data-endpoint="cities"] dd[data-fact="records"]', { hasText: '300' })
      .waitFor({ timeout: 30_000 });
  });
});
