/**
 * The operator console in real headless Chromium while its app-server goes away and comes back: what the Endpoints
 * page says about the connection it shows its picture from.
 */
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseConfigText } from '@sluice/core';
import { CHROMIUM_PATH, chromiumLaunchOptions, tempDir } from '@sluice/testkit';
import { chromium } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { cityLines } from '../../../scripts/prepare-quickstart-data.mjs';
import { localNode, startNodeProcess } from './helpers.js';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const BUILT = fileURLToPath(new URL('../dist/console/index.html', import.meta.url));

describe('the console while its app-server stops and starts', () => {
  it('defect: the Endpoints page said "Live" over a stale picture while its app-server was down', async () => {
    expect(existsSync(CHROMIUM_PATH)).toBe(true);
    expect(existsSync(BUILT), 'the console is built (pnpm build)').toBe(true);
    await using dir = await tempDir('sluice-console-connection-');
    const source = join(dir.path, 'cities.jsonl');
    await writeFile(source, `${cityLines(500).join('\n')}\n`);
    const text = await readFile(join(ROOT, 'examples/quickstart/sluice.yaml'), 'utf8');
    const endpoint = {
      ...parseConfigText(text).endpoints[0]!,
      source: { type: 'file', path: source, format: 'jsonl' },
    };
    const spec = { ...localNode('conn', dir.path), extraYaml: `endpoints: ${JSON.stringify([endpoint])}` };
    const first = await startNodeProcess(spec);
    let second: Awaited<ReturnType<typeof startNodeProcess>> | undefined;
    const profile = await tempDir('sluice-console-chromium-');
    const context = await chromium.launchPersistentContext(profile.path, {
      ...chromiumLaunchOptions(),
      headless: true,
    });
    const errors: string[] = [];
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      page.on('pageerror', (err) => errors.push(err.message));
      await page.goto(`${first.url}/console`);
      const card = page.locator('article[data-endpoint="cities"]');
      await card.locator('dd[data-fact="records"]', { hasText: '500' }).waitFor({ timeout: 60_000 });
      const status = page.locator('.page-head [role="status"]');
      await status.filter({ hasText: /^Live$/ }).waitFor();

      // The app-server stops: the picture on the page is no longer kept up to date, and the page says so.
      expect((await first.child.stop('SIGTERM', 30_000)).code).toBe(0);
      await status.filter({ hasNotText: /^Live$/ }).waitFor({ timeout: 30_000 });
      expect(await status.textContent()).toMatch(/^Not live: .*reconnecting…$/);
      // Nothing the operator could click would reach a server.
      expect(await card.getByRole('button', { name: 'Rebuild' }).isDisabled()).toBe(true);

      // It comes back on the same port: live again by itself, with the picture of the new process.
      second = await startNodeProcess({ ...spec, port: first.port });
      await status.filter({ hasText: /^Live$/ }).waitFor({ timeout: 60_000 });
      await card.locator('dd[data-fact="records"]', { hasText: '500' }).waitFor();
      expect(await card.getByRole('button', { name: 'Rebuild' }).isDisabled()).toBe(false);
      expect(errors).toEqual([]);
    } finally {
      await context.close();
      await profile[Symbol.asyncDispose]();
      await second?.[Symbol.asyncDispose]();
      await first[Symbol.asyncDispose]();
    }
  }, 180_000);
});
