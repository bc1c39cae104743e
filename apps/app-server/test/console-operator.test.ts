/**
 * The operator console in real headless Chromium, used as an operator would against real app-server processes: a
 * token that expires while the page is open, moving between transfers, and actions that cannot be taken back.
 */
import { join } from 'node:path';
import { createClient } from '@sluice/client';
import { signJwt, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { citiesEndpoint, openConsoleBrowser } from './console-browser.js';
import { call, fileTransfer, localNode, startNodeProcess, waitForState, writeRecords } from './helpers.js';

const SECRET = 'console-operator-jwt-secret-0123456789';

describe('the operator console, used as an operator would', () => {
  it('defect: a JWT that expired while the Endpoints page was open kept it live, and did not ask for a token again', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-expiry-');
    const { endpoint } = await citiesEndpoint(dir.path, 300);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: [
        `control: { auth: { jwtSecret: "${SECRET}" } }`,
        `endpoints: ${JSON.stringify([endpoint])}`,
      ].join('\n'),
    });
    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${node.url}/console`);
    // A token valid for a few seconds: the page is signed in, live, then the token expires under it.
    const expiresAt = Date.now() + 15_000;
    await page
      .getByRole('textbox', { name: 'Bearer token' })
      .fill(signJwt(SECRET, { sub: 'op', exp: Math.floor(expiresAt / 1000) }));
    await page.getByRole('button', { name: 'Sign in' }).click();
    const card = page.locator('article[data-endpoint="cities"]');
    await card.locator('dd[data-fact="records"]', { hasText: '300' }).waitFor({ timeout: 30_000 });
    await page
      .locator('.page-head [role="status"]')
      .filter({ hasText: /^Live$/ })
      .waitFor();
    expect(Date.now()).toBeLessThan(expiresAt);

    // Expired: the page asks for a token again, saying why, and shows nothing of the endpoints any more.
    await page.getByRole('textbox', { name: 'Bearer token' }).waitFor({ timeout: 30_000 });
    expect(await page.getByRole('alert').textContent()).toContain('expired');
    expect(await page.locator('article').count()).toBe(0);
    expect(await page.evaluate('sessionStorage.length')).toBe(0);

    // A renewed token: back where the operator was.
    await page
      .getByRole('textbox', { name: 'Bearer token' })
      .fill(signJwt(SECRET, { sub: 'op', exp: Math.floor(Date.now() / 1000) + 600 }));
    await page.getByRole('button', { name: 'Sign in' }).click();
    await card.locator('dd[data-fact="records"]', { hasText: '300' }).waitFor();
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('textbox', { name: 'Bearer token' }).waitFor();
    expect(await page.getByRole('alert').count()).toBe(0);
    expect(await page.evaluate('sessionStorage.length')).toBe(0);
  });

  it("defect: a transfer's detail page showed the previous transfer's record, and its Terminate, under another id", {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-detail-');
    await using node = await startNodeProcess(localNode('h1', dir.path));
    const input = await writeRecords(join(dir.path, 'in.jsonl'), 2_000);
    await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('done-copy', input, join(dir.path, 'done.jsonl')),
    });
    await waitForState(node.url, 'done-copy', 'COMPLETED');
    // Slow enough to stay IN_PROGRESS for the whole test.
    await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('slow-copy', input, join(dir.path, 'slow.jsonl'), 5),
    });
    await waitForState(node.url, 'slow-copy', 'IN_PROGRESS');

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${node.url}/console#/transfers/slow-copy`);
    const state = page.locator('[data-fact="state"]');
    await state.filter({ hasText: 'IN_PROGRESS' }).waitFor();
    await page.getByRole('button', { name: 'Terminate' }).waitFor();

    // The operator follows a link to a transfer that does not exist (a typo, or purged since).
    await page.evaluate("window.location.hash = '#/transfers/no-such-copy'");
    await page.getByRole('heading', { name: 'Transfer no-such-copy' }).waitFor();
    await page.getByRole('alert').filter({ hasText: 'TRANSFER_NOT_FOUND' }).waitFor();
    // Nothing of slow-copy under no-such-copy's name: no state, no request, no Terminate that would stop it.
    expect(await state.count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Terminate' }).count()).toBe(0);
    expect(await page.locator('main').textContent()).not.toContain('slow.jsonl');

    // From a running transfer to a completed one: its own state only, and no outcome of an action on the other.
    await page.goto(`${node.url}/console#/transfers/slow-copy`);
    await state.filter({ hasText: 'IN_PROGRESS' }).waitFor();
    await page.getByRole('button', { name: 'Terminate' }).click();
    await page.getByRole('button', { name: 'Yes, terminate slow-copy' }).click();
    await page.getByRole('status').filter({ hasText: 'Terminate sent' }).waitFor({ timeout: 30_000 });
    await page.evaluate("window.location.hash = '#/transfers/done-copy'");
    await page.getByRole('heading', { name: 'Transfer done-copy' }).waitFor();
    await state.filter({ hasText: 'COMPLETED' }).waitFor();
    expect(await page.locator('main').textContent()).not.toContain('Terminate sent');
    expect(browser.actions).toEqual(['POST /v1/transfers/slow-copy/terminate']);
  });

  it('defect: Terminate, Promote and Roll back acted on the first click, with nothing to confirm', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-confirm-');
    const { endpoint } = await citiesEndpoint(dir.path, 300, { switch: { mode: 'manual' } });
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: ['cache: { gcGraceMs: 3600000 }', `endpoints: ${JSON.stringify([endpoint])}`].join('\n'),
    });
    const client = createClient({ controlUrl: node.url });
    const input = await writeRecords(join(dir.path, 'in.jsonl'), 2_000);
    await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('slow-copy', input, join(dir.path, 'slow.jsonl'), 5),
    });
    await waitForState(node.url, 'slow-copy', 'IN_PROGRESS');

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${node.url}/console#/transfers/slow-copy`);
    await page.locator('[data-fact="state"]', { hasText: 'IN_PROGRESS' }).waitFor();
    // From the keyboard: Terminate asks first, and Cancel (where the focus goes) stops nothing.
    await page.getByRole('button', { name: 'Terminate' }).focus();
    await page.keyboard.press('Enter');
    const confirmTerminate = page.getByRole('group', { name: 'Confirm Terminate' });
    await confirmTerminate.waitFor({ timeout: 5_000 });
    expect(await confirmTerminate.textContent()).toContain('slow-copy');
    await page.keyboard.press('Enter');
    await confirmTerminate.waitFor({ state: 'detached' });
    expect(browser.actions).toEqual([]);
    expect((await client.transfers.get('slow-copy')).state).toBe('IN_PROGRESS');
    // Confirmed (a double click sends it once): terminated.
    await page.getByRole('button', { name: 'Terminate' }).click();
    await page.getByRole('button', { name: 'Yes, terminate slow-copy' }).dblclick();
    await page.locator('[data-fact="state"]', { hasText: 'TERMINATED' }).waitFor({ timeout: 30_000 });
    expect(browser.actions).toEqual(['POST /v1/transfers/slow-copy/terminate']);
    browser.actions.length = 0;

    // A held generation (manual switch mode): Promote asks first.
    await page.goto(`${node.url}/console#/endpoints`);
    const card = page.locator('article[data-endpoint="cities"]');
    await card.locator('dd[data-fact="records"]', { hasText: '300' }).waitFor({ timeout: 30_000 });
    const blue = (await client.control.endpoints())[0]!.servingCache!;
    await card.getByRole('button', { name: 'Rebuild' }).click();
    const held = card.getByRole('region', { name: 'Held generations' });
    await held.waitFor({ timeout: 30_000 });
    const green = (await client.control.endpoints())[0]!.held!.cache;
    const short = (name: string) => name.slice('cities-'.length);
    await held.getByRole('button', { name: `Promote ${short(green)}` }).click();
    await card.getByRole('group', { name: 'Confirm Promote' }).waitFor({ timeout: 5_000 });
    expect(browser.actions).toEqual(['POST /v1/endpoints/cities/rebuild']);
    expect((await client.control.endpoints())[0]!.servingCache).toBe(blue);
    await card.getByRole('button', { name: `Yes, promote ${short(green)}` }).click();
    await card.locator('.timeline li[data-cause="promote"]').waitFor();
    expect((await client.control.endpoints())[0]!.servingCache).toBe(green);

    // Roll back asks first too.
    await card.getByRole('button', { name: `Roll back to ${short(blue)}` }).click();
    await card.getByRole('group', { name: 'Confirm Roll back' }).waitFor({ timeout: 5_000 });
    expect((await client.control.endpoints())[0]!.servingCache).toBe(green);
    await card.getByRole('button', { name: `Yes, roll back to ${short(blue)}` }).click();
    await card.locator('.timeline li[data-cause="rollback"]').waitFor();
    expect((await client.control.endpoints())[0]!.servingCache).toBe(blue);
    expect(browser.actions).toEqual([
      'POST /v1/endpoints/cities/rebuild',
      'POST /v1/endpoints/cities/promote',
      'POST /v1/endpoints/cities/rollback',
    ]);
  });

  it('defect: the Nodes page and a transfer page kept saying "1 of 1 alive" and offering Terminate over data no longer refreshed, while their app-server was down', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-stale-');
    await using node = await startNodeProcess(localNode('h1', dir.path));
    const input = await writeRecords(join(dir.path, 'in.jsonl'), 2_000);
    // Slow enough to stay IN_PROGRESS until the node stops.
    await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('slow-copy', input, join(dir.path, 'slow.jsonl'), 5),
    });
    await waitForState(node.url, 'slow-copy', 'IN_PROGRESS');

    await using browser = await openConsoleBrowser();
    const nodes = browser.page;
    await nodes.goto(`${node.url}/console#/nodes`);
    // The page's status line, beside its heading.
    const nodesStatus = nodes.locator('.page-head > p');
    await nodesStatus.filter({ hasText: '1 of 1 alive' }).waitFor({ timeout: 30_000 });
    const members = nodes.getByRole('table', { name: 'Cluster members' });
    expect(await members.getAttribute('aria-busy')).toBeNull();
    const detail = await browser.context.newPage();
    await detail.goto(`${node.url}/console#/transfers/slow-copy`);
    await detail.locator('[data-fact="state"]', { hasText: 'IN_PROGRESS' }).waitFor({ timeout: 30_000 });
    expect(await detail.getByRole('button', { name: 'Terminate' }).isDisabled()).toBe(false);

    // The app-server stops: what both pages show is what they last read, and they say so.
    expect((await node.child.stop('SIGTERM', 30_000)).code).toBe(0);
    await nodes.getByRole('alert').waitFor({ timeout: 30_000 });
    expect(await nodesStatus.textContent()).toMatch(
      /^Not live: the last refresh failed; showing what was read at /,
    );
    expect(await members.getAttribute('aria-busy')).toBe('true');
    expect(await members.getAttribute('class')).toContain('stale');
    await detail.getByRole('alert').waitFor({ timeout: 30_000 });
    await detail
      .locator('p')
      .filter({ hasText: /^Not live: the last refresh failed/ })
      .waitFor();
    expect(await detail.locator('dl.facts').getAttribute('aria-busy')).toBe('true');
    // Nothing the operator could click would reach a server, nor act on what may have changed since.
    expect(await detail.getByRole('button', { name: 'Terminate' }).isDisabled()).toBe(true);
    expect(browser.actions).toEqual([]);
  });

  it('defect: /console/index.html answered 404 while /console served the page', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-index-');
    await using node = await startNodeProcess(localNode('h1', dir.path));
    const page = await fetch(`${node.url}/console`);
    const index = await fetch(`${node.url}/console/index.html`);
    expect(index.status).toBe(200);
    expect(index.headers.get('content-type')).toBe(page.headers.get('content-type'));
    expect(index.headers.get('content-security-policy')).toBe(page.headers.get('content-security-policy'));
    expect(await index.text()).toBe(await page.text());
  });

  it('defect: reloading the console with a stored token that had since expired said the token was refused, not that it expired', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir('sluice-console-reload-');
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: `control: { auth: { jwtSecret: "${SECRET}" } }`,
    });
    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${node.url}/console#/nodes`);
    await page
      .getByRole('textbox', { name: 'Bearer token' })
      .fill(signJwt(SECRET, { sub: 'op', exp: Math.floor(Date.now() / 1000) + 600 }));
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('table', { name: 'Cluster members' }).waitFor({ timeout: 30_000 });

    // The tab keeps a token that expired since (a laptop woken the next morning), and the operator reloads.
    const stored = async (token: string) => {
      await page.evaluate(`sessionStorage.setItem('sluice.console.token', ${JSON.stringify(token)})`);
      await page.reload();
      await page.getByRole('textbox', { name: 'Bearer token' }).waitFor({ timeout: 30_000 });
      return page.getByRole('alert').textContent();
    };
    const expired = await stored(signJwt(SECRET, { sub: 'op', exp: Math.floor(Date.now() / 1000) - 60 }));
    expect(expired).toContain('expired');
    expect(expired).not.toContain('refused');
    // A token the control API never accepted (another secret) is still refused, not "expired".
    const forged = await stored(signJwt('another-secret-of-sufficient-length', { sub: 'op' }));
    expect(forged).toContain('refused');
    expect(forged).not.toContain('expired');
  });
});
