import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM_PATH, chromiumLaunchOptions, tempDir } from '@sluice/testkit';
import { chromium } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { item, startApi, startWriter } from './servers.js';

/** The built ESM bundle: what a browser application imports (`pnpm build` runs before the tests). */
const BUNDLE = fileURLToPath(new URL('../dist/index.js', import.meta.url));

const PAGE = (api: string) => `<!doctype html><html><body><script type="module">
import { createClient, SluiceClientError } from '/client.js';
const items = createClient({ queryUrl: ${JSON.stringify(api)} }).endpoint('items');
const out = { count: await items.count(), seven: await items.get(7), scanned: [] };
for await (const row of items.scan({ $limit: 7 })) out.scanned.push(row.id);
try { await items.query({ $limit: -1 }); } catch (err) { out.error = { isTyped: err instanceof SluiceClientError, code: err.code, status: err.status }; }
const local = new Map();
window.__events = [];
window.__local = () => [...local.values()].sort((a, b) => a.id - b.id);
window.__out = out;
for await (const event of items.changes({ backoff: { initialMs: 50, maxMs: 500 } })) {
  if (event.type === 'upsert') local.set(event.key[0], event.record);
  else if (event.type === 'delete') local.delete(event.key[0]);
  else if (event.type === 'reset') local.clear();
  window.__events.push(event.type);
}
</script></body></html>`;

describe('@sluice/client in a browser page (headless Chromium)', () => {
  it('queries, pages and follows the change feed of a real api-server, cross-origin', async () => {
    expect(existsSync(CHROMIUM_PATH), 'chromium is installed (.ci/run: apt-get install -y chromium)').toBe(
      true,
    );
    expect(existsSync(BUNDLE), 'the client is built (pnpm build)').toBe(true);
    await using dir = await tempDir();
    await using writer = await startWriter(
      join(dir.path, 'data'),
      Array.from({ length: 20 }, (_, i) => item(i + 1)),
    );
    await using api = await startApi(dir.path, writer.root, { cors: { origins: true } });
    const site = createServer((req, res) => {
      if (req.url === '/client.js') {
        res.writeHead(200, { 'content-type': 'text/javascript' });
        res.end(readFileSync(BUNDLE));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(PAGE(api.url));
    });
    await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
    const { port } = site.address() as AddressInfo;
    const profile = await tempDir('sluice-chromium-');
    // A fresh profile per run.
    const browser = await chromium.launchPersistentContext(profile.path, {
      ...chromiumLaunchOptions(),
      headless: true,
    });
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (err) => errors.push(err.message));
      await page.goto(`http://127.0.0.1:${port}/`);
      await page.waitForFunction(() => (window as unknown as { __out?: unknown }).__out !== undefined, null, {
        timeout: 30_000,
      });
      const out = await page.evaluate(() => (window as unknown as { __out: unknown }).__out);
      expect(out).toEqual({
        count: 20,
        seven: item(7),
        scanned: Array.from({ length: 20 }, (_, i) => i + 1),
        error: { isTyped: true, code: 'INVALID_QUERY', status: 400 },
      });
      const eventsOf = () => page.evaluate(() => (window as unknown as { __events: string[] }).__events);
      await page.waitForFunction(() =>
        (window as unknown as { __events: string[] }).__events.includes('live'),
      );
      await writer.commit([
        { op: 'upsert', record: item(3, 7) },
        { op: 'delete', key: [4] },
        { op: 'upsert', record: item(21) },
      ]);
      await page.waitForFunction(() =>
        (window as unknown as { __events: string[] }).__events.includes('commit'),
      );
      const local = await page.evaluate(() => (window as unknown as { __local: () => unknown[] }).__local());
      const expected = Array.from({ length: 21 }, (_, i) => item(i + 1))
        .filter((r) => r.id !== 4)
        .map((r) => (r.id === 3 ? item(3, 7) : r));
      expect(local).toEqual(expected);
      expect((await eventsOf()).slice(-4)).toEqual(['upsert', 'delete', 'upsert', 'commit']);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
      await new Promise((resolve) => site.close(resolve));
      await profile[Symbol.asyncDispose]();
    }
  }, 120_000);
});
