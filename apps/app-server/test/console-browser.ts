/**
 * Headless Chromium over the operator console, as the console tests open it: a fresh profile, and every sign of a
 * broken page collected — uncaught errors, errors the page logs, requests to anything but this machine (the console
 * fetches nothing from the internet; such requests are refused, not sent) — and asserted to be none at the end.
 */
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseConfigText } from '@sluice/core';
import { CHROMIUM_PATH, chromiumLaunchOptions, tempDir } from '@sluice/testkit';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { expect } from 'vitest';
import { cityLines } from '../../../scripts/prepare-quickstart-data.mjs';

const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const BUILT = fileURLToPath(new URL('../dist/console/index.html', import.meta.url));
const LOCAL_HOSTS: ReadonlySet<string> = new Set(['127.0.0.1', 'localhost', '[::1]']);

/**
 * Chromium logs every fetch answered with an error status or refused ("Failed to load resource: …") by itself: a
 * 401 before the token prompt, a 404 of a missing transfer, a refused connection while the app-server is down are
 * what the console is tested with. Anything else logged as an error is the console's own.
 */
const BROWSER_NETWORK_LOG = /^Failed to load resource: /;

/** A browser page for the console; disposing it closes the browser and checks nothing went wrong in the page. */
export interface ConsoleBrowser extends AsyncDisposable {
  readonly context: BrowserContext;
  readonly page: Page;
  /** The POST requests the page sent (the operator's actions), as `METHOD path`. */
  readonly actions: string[];
  /** Closes the browser and asserts no page error, no logged error and no foreign request happened. */
  close(): Promise<void>;
}

/**
 * Opens headless Chromium on a fresh profile.
 *
 * @example
 * ```ts
 * await using browser = await openConsoleBrowser();
 * await browser.page.goto(`${node.url}/console`);
 * ```
 */
export async function openConsoleBrowser(): Promise<ConsoleBrowser> {
  expect(existsSync(CHROMIUM_PATH), 'chromium is installed (.ci/run: apt-get install -y chromium)').toBe(
    true,
  );
  expect(existsSync(BUILT), 'the console is built (pnpm build)').toBe(true);
  const profile = await tempDir('sluice-console-chromium-');
  const context = await chromium.launchPersistentContext(profile.path, {
    ...chromiumLaunchOptions(),
    headless: true,
    viewport: { width: 1366, height: 900 },
  });
  const problems: string[] = [];
  const actions: string[] = [];
  await context.route(
    (url) => url.protocol !== 'data:' && !LOCAL_HOSTS.has(url.hostname),
    async (route) => {
      problems.push(`request to ${route.request().url()}`);
      await route.abort();
    },
  );
  const page = context.pages()[0] ?? (await context.newPage());
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && !BROWSER_NETWORK_LOG.test(message.text()))
      problems.push(`console.error: ${message.text()}`);
  });
  page.on('request', (request) => {
    if (request.method() === 'POST') actions.push(`POST ${new URL(request.url()).pathname}`);
  });
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await context.close();
    await profile[Symbol.asyncDispose]();
    expect(problems).toEqual([]);
  };
  return { context, page, actions, close, [Symbol.asyncDispose]: close };
}

/**
 * The quick start's endpoint ("cities", as examples/quickstart/sluice.yaml defines it) over the first `count` cities
 * of its dataset, written to `dir/cities.jsonl`; `extra` overrides keys (`switch`, …).
 */
export async function citiesEndpoint(
  dir: string,
  count: number,
  extra: Record<string, unknown> = {},
): Promise<{ source: string; endpoint: Record<string, unknown> }> {
  const source = join(dir, 'cities.jsonl');
  await writeFile(source, `${cityLines(count).join('\n')}\n`);
  const text = await readFile(join(ROOT, 'examples/quickstart/sluice.yaml'), 'utf8');
  const endpoint = parseConfigText(text).endpoints[0]!;
  return { source, endpoint: { ...endpoint, source: { ...endpoint.source, path: source }, ...extra } };
}
