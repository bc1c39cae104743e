/**
 * Text the console shows that its operator did not write — a record refused by the endpoint's schema, a transfer's
 * properties and its error — carrying HTML and script: the page must show it as text, run nothing and add no element.
 * Headless Chromium against a real app-server process.
 */
import { appendFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { citiesEndpoint, openConsoleBrowser } from './console-browser.js';
import { call, localNode, startNodeProcess, waitForState } from './helpers.js';

const MARKUP = '<img src=x onerror="window.__injected=1"><script>window.__injected=2</script>';

describe('text from data and requests in the console', () => {
  it('shows HTML in a refused record, in transfer properties and in an error as text, and runs none of it', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-untrusted-');
    const { source, endpoint } = await citiesEndpoint(dir.path, 50);
    // A record the schema refuses (its id is no integer): skipped, its reason shown on the card.
    await appendFile(source, `${JSON.stringify({ id: MARKUP, name: MARKUP })}\n`);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: `endpoints: ${JSON.stringify([endpoint])}`,
    });
    // A transfer whose properties carry markup, and whose source is missing: it fails with an error naming it.
    const missing = join(dir.path, 'missing.jsonl');
    const submitted = await call(`${node.url}/v1/transfers`, {
      json: {
        id: 'markup-copy',
        mode: 'idempotent',
        source: { type: 'file', path: missing, format: 'jsonl' },
        destination: { type: 'file', path: join(dir.path, 'out.jsonl'), format: 'jsonl' },
        properties: { note: MARKUP },
      },
    });
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(201);

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${node.url}/console#/endpoints`);
    const card = page.locator('article[data-endpoint="cities"]');
    await card.locator('dd[data-fact="bad-records"]', { hasText: '1' }).waitFor({ timeout: 30_000 });
    const reason = card.locator('dd[data-fact="bad-record-reason"]');
    await reason.waitFor();
    // The reason is text only: no element the markup could have made.
    expect(await reason.locator('img, script').count()).toBe(0);

    await waitForState(node.url, 'markup-copy', 'FAILED');
    await page.goto(`${node.url}/console#/transfers/markup-copy`);
    await page.locator('[data-fact="state"]', { hasText: 'FAILED' }).waitFor({ timeout: 30_000 });
    const request = page.getByRole('region', { name: 'Request' });
    // The markup shown as it was sent (JSON-escaped quotes), not interpreted.
    expect(await request.textContent()).toContain('<img src=x onerror=\\"window.__injected=1\\">');
    expect(await page.locator('main img, main script').count()).toBe(0);
    expect(await page.evaluate('window.__injected')).toBeUndefined();
    expect(await page.locator('img, body script').count()).toBe(0);
  });
});
