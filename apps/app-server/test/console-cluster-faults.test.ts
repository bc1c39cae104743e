/**
 * The operator console in real headless Chromium on node A of a two-node cluster (both app-servers on one PostgreSQL
 * store of the test's own, a private nats-server): B killed while A's pages show its transfer; A — the node the page
 * talks to — killed and restarted on its port, or frozen (SIGSTOP) and thawed (SIGCONT). What the page says it shows,
 * and which of its buttons act, against the control API's answers.
 */
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createClient } from '@sluice/client';
import { createTestDatabase, sql, startNatsServer, tempDir, testPostgresUrl, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { citiesEndpoint, openConsoleBrowser } from './console-browser.js';
import {
  call,
  fileTransfer,
  type NodeProcess,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

/** Node A (the page's, with the quick start's endpoint) and node B (no endpoint), on one store and one NATS. */
async function startPair(root: string, store: string, nats: string, endpoint: Record<string, unknown>) {
  const common = { store, nats, roots: [root] };
  const a = await startNodeProcess({
    ...common,
    nodeId: 'a',
    dir: join(root, 'a'),
    extraYaml: `endpoints: ${JSON.stringify([endpoint])}`,
  });
  try {
    const b = await startNodeProcess({ ...common, nodeId: 'b', dir: join(root, 'b') });
    return { a, b };
  } catch (err) {
    await a[Symbol.asyncDispose]();
    throw err;
  }
}

/** Freezes `node` (SIGSTOP) for as long as `during` runs, and thaws it (SIGCONT) whatever happens. */
async function frozen<T>(node: NodeProcess, during: () => Promise<T>): Promise<T> {
  node.child.kill('SIGSTOP');
  try {
    return await during();
  } finally {
    node.child.kill('SIGCONT');
  }
}

/**
 * A two-node cluster of the test's own — a store database, a nats-server, a directory — with the quick start's
 * `cities` endpoint of `records` records on A. Disposed in reverse: B, A, the directory, NATS, the database.
 */
async function startCluster(name: string, records: number) {
  // Each part is disposed in reverse if a later one fails to start, as `await using` would.
  const started: AsyncDisposable[] = [];
  const disposeAll = async () => {
    for (const part of started.reverse()) await part[Symbol.asyncDispose]();
  };
  try {
    const storeDb = await createTestDatabase(`sluice_console_${name.replaceAll('-', '_')}`);
    started.push(storeDb);
    const nats = await startNatsServer();
    started.push(nats);
    const dir = await tempDir(`sluice-console-${name}-`);
    started.push(dir);
    const { endpoint } = await citiesEndpoint(dir.path, records);
    const { a, b } = await startPair(dir.path, storeDb.url, nats.url, endpoint);
    started.push(a, b);
    return { storeDb, nats, dir, a, b, [Symbol.asyncDispose]: disposeAll };
  } catch (err) {
    await disposeAll();
    throw err;
  }
}

type Cluster = Awaited<ReturnType<typeof startCluster>>;

/** A 5 000-record file copy submitted to B at `recordsPerSecond`, so B owns it while it runs: its record then. */
async function transferOwnedByB({ b, dir }: Cluster, id: string, recordsPerSecond: number) {
  const input = await writeRecords(join(dir.path, 'in.jsonl'), 5_000);
  const submitted = await call(`${b.url}/v1/transfers`, {
    json: fileTransfer(id, input, join(dir.path, 'out.jsonl'), recordsPerSecond),
  });
  expect(submitted.status).toBe(201);
  return waitForState(b.url, id, 'IN_PROGRESS');
}

describe('the console on node A of a two-node cluster under faults', () => {
  it('defect: a transfer page frozen with its app-server said "Refreshed every 2 s" and offered Terminate until its poll timed out (30 s)', {
    timeout: 90_000,
  }, async () => {
    await using cluster = await startCluster('frozen-transfer', 200);
    const { a } = cluster;
    const id = 'frozen-page-copy';
    await transferOwnedByB(cluster, id, 20);

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${a.url}/console#/transfers/${id}`);
    await page.locator('[data-fact="state"]', { hasText: 'IN_PROGRESS' }).waitFor({ timeout: 30_000 });
    const facts = page.locator('dl.facts');
    await facts.getByText('b (http://127.0.0.1:').waitFor();
    const status = page.getByRole('status').filter({ hasText: /refresh/i });
    const terminate = page.getByRole('button', { name: 'Terminate' });
    expect(await status.textContent()).toBe('Refreshed every 2 s');
    expect(await terminate.isDisabled()).toBe(false);

    const seen = await frozen(a, async () => {
      // Six of the page's refresh intervals with no answer (a poll's deadline is 5 s): what it shows is no longer
      // refreshed.
      await sleep(12_000);
      return {
        status: await status.textContent(),
        why: await page.getByRole('alert').textContent(),
        terminateDisabled: await terminate.isDisabled(),
      };
    });
    expect(seen.status).toMatch(/^Not live: /);
    expect(seen.why).toBe('the app-server did not answer within 5 s');
    expect(seen.terminateDisabled).toBe(true);

    // Thawed: refreshed by itself, with the record as the control API has it, and Terminate offered again.
    await status.filter({ hasText: /^Refreshed every 2 s$/ }).waitFor({ timeout: 30_000 });
    const truth = await createClient({ controlUrl: a.url }).transfers.get(id);
    expect(truth).toMatchObject({ state: 'IN_PROGRESS', owner: { nodeId: 'b' } });
    expect(await page.locator('[data-fact="state"]').textContent()).toBe('IN_PROGRESS');
    expect(await terminate.isDisabled()).toBe(false);
    expect(browser.actions).toEqual([]);
  });

  it('defect: the Endpoints page said "Live" and offered Rebuild for 45 s after its app-server froze', {
    timeout: 90_000,
  }, async () => {
    await using cluster = await startCluster('frozen-endpoints', 300);
    const { a } = cluster;

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${a.url}/console#/endpoints`);
    const card = page.locator('article[data-endpoint="cities"]');
    await card.locator('dd[data-fact="records"]', { hasText: '300' }).waitFor({ timeout: 60_000 });
    const status = page.locator('.page-head [role="status"]');
    await status.filter({ hasText: /^Live$/ }).waitFor();
    const rebuild = card.getByRole('button', { name: 'Rebuild' });

    const seen = await frozen(a, async () => {
      // Frozen for longer than a few heartbeats: nothing reaches the page, so it cannot be live.
      await sleep(15_000);
      return { status: await status.textContent(), rebuildDisabled: await rebuild.isDisabled() };
    });
    expect(seen.status).toMatch(/^Not live: /);
    expect(seen.rebuildDisabled).toBe(true);

    // Thawed: live again by itself, with the picture the control API gives — one timeline entry per switch.
    await status.filter({ hasText: /^Live$/ }).waitFor({ timeout: 30_000 });
    const client = createClient({ controlUrl: a.url });
    const { history } = await client.control.generations('cities');
    expect(await card.locator('ol.timeline > li').count()).toBe(history.length);
    expect(await card.locator('dd[data-fact="records"]').textContent()).toBe('300');
    expect(await rebuild.isDisabled()).toBe(false);
    expect(browser.actions).toEqual([]);
  });

  it('follows a transfer of a killed node B to its new owner, and shows B dead, without a reload', {
    timeout: 90_000,
  }, async () => {
    await using cluster = await startCluster('owner-killed', 50);
    const { a, b } = cluster;
    const id = 'owner-killed-copy';
    const before = await transferOwnedByB(cluster, id, 50);
    expect(before.owner.nodeId).toBe('b');

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${a.url}/console#/transfers/${id}`);
    const facts = page.locator('dl.facts');
    await facts.getByText(`b (${b.url})`).waitFor({ timeout: 30_000 });
    const nodes = await browser.context.newPage();
    await nodes.goto(`${a.url}/console#/nodes`);
    await nodes.locator('.page-head > p').filter({ hasText: '2 of 2 alive' }).waitFor({ timeout: 30_000 });
    // A mark a reload would wipe: what follows must reach the page by its own refreshes.
    await page.evaluate('window.sluiceTestMark = 1');
    await nodes.evaluate('window.sluiceTestMark = 1');

    b.child.kill('SIGKILL');
    await b.child.exited;
    // Taken over after B's lease (by A's sweeper): the page names the new owner and its epoch, as the API does.
    await facts.getByText(`a (${a.url})`).waitFor({ timeout: 30_000 });
    const after = await createClient({ controlUrl: a.url }).transfers.get(id);
    expect(after.owner?.nodeId).toBe('a');
    expect(after.epoch).toBeGreaterThan(before.epoch);
    await facts.getByText(`${after.epoch} / `).waitFor();
    await nodes.locator('tr[data-node="b"] .state-dead').waitFor({ timeout: 30_000 });
    const members = await createClient({ controlUrl: a.url }).control.nodes();
    expect(members.map((n) => [n.nodeId, n.alive]).sort()).toEqual([
      ['a', true],
      ['b', false],
    ]);
    expect(await nodes.locator('.page-head > p').textContent()).toMatch(/^1 of 2 alive/);
    expect(await page.evaluate('window.sluiceTestMark')).toBe(1);
    expect(await nodes.evaluate('window.sluiceTestMark')).toBe(1);
    expect(browser.actions).toEqual([]);
  });

  it('says "Not live" while A is killed and comes back live with the picture of its new process', {
    timeout: 90_000,
  }, async () => {
    await using cluster = await startCluster('page-node-killed', 300);
    const { a } = cluster;
    let restarted: NodeProcess | undefined;
    try {
      await using browser = await openConsoleBrowser();
      const { page } = browser;
      await page.goto(`${a.url}/console#/endpoints`);
      const card = page.locator('article[data-endpoint="cities"]');
      await card.locator('dd[data-fact="records"]', { hasText: '300' }).waitFor({ timeout: 60_000 });
      const status = page.locator('.page-head [role="status"]');
      await status.filter({ hasText: /^Live$/ }).waitFor();
      await page.evaluate('window.sluiceTestMark = 1');

      a.child.kill('SIGKILL');
      await a.child.exited;
      await status.filter({ hasText: /^Not live: / }).waitFor({ timeout: 30_000 });
      expect(await card.getByRole('button', { name: 'Rebuild' }).isDisabled()).toBe(true);

      restarted = await startNodeProcess({ ...a.spec, port: a.port });
      await status.filter({ hasText: /^Live$/ }).waitFor({ timeout: 60_000 });
      const client = createClient({ controlUrl: a.url });
      const truth = await client.control.generations('cities');
      const serving = (await client.control.endpoints())[0]!.servingCache!;
      // Once the picture of the new process settles (a restart may switch to a new generation): the API's.
      await card.locator('dd code', { hasText: serving }).waitFor({ timeout: 30_000 });
      const shown = await card.locator('ol.timeline > li').count();
      expect(shown).toBe((await client.control.generations('cities')).history.length);
      expect(truth.history.length).toBeGreaterThanOrEqual(1);
      expect(await card.locator('dd[data-fact="records"]').textContent()).toBe('300');
      expect(await page.evaluate('window.sluiceTestMark')).toBe(1);
      expect(browser.actions).toEqual([]);
    } finally {
      // A itself (killed) is the cluster's to dispose.
      await restarted?.[Symbol.asyncDispose]();
    }
  });

  it("with NATS stopped: a rebuild on A shows its progress and switch, and Terminate of B's transfer answers", {
    timeout: 90_000,
  }, async () => {
    await using cluster = await startCluster('nats-stopped', 2_000);
    const { a, nats } = cluster;
    const id = 'nats-stopped-copy';
    await transferOwnedByB(cluster, id, 20);
    const client = createClient({ controlUrl: a.url });

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${a.url}/console#/endpoints`);
    const card = page.locator('article[data-endpoint="cities"]');
    await card.locator('dd[data-fact="records"]', { hasText: '2,000' }).waitFor({ timeout: 60_000 });
    const blue = (await client.control.endpoints())[0]!.servingCache!;
    const switchesBefore = (await client.control.generations('cities')).history.length;

    await nats.stop();
    await waitFor(async () => (await call(`${a.url}/readyz`)).body.checks?.backplane !== 'up', {
      timeoutMs: 15_000,
      what: 'A to notice NATS is gone',
    });
    await card.getByRole('button', { name: 'Rebuild' }).click();
    await card
      .getByRole('status')
      .filter({ hasText: 'Rebuild of cities started' })
      .waitFor({ timeout: 30_000 });
    await card.locator('ol.timeline > li').nth(switchesBefore).waitFor({ timeout: 60_000 });
    const after = await client.control.endpoints();
    expect(after[0]!.servingCache).not.toBe(blue);
    await card.locator('dd code', { hasText: after[0]!.servingCache! }).waitFor({ timeout: 10_000 });
    expect(await card.locator('ol.timeline > li').count()).toBe(
      (await client.control.generations('cities')).history.length,
    );

    await page.goto(`${a.url}/console#/transfers/${id}`);
    await page.locator('[data-fact="state"]', { hasText: 'IN_PROGRESS' }).waitFor({ timeout: 30_000 });
    await page.getByRole('button', { name: 'Terminate' }).click();
    await page.getByRole('button', { name: `Yes, terminate ${id}` }).click();
    const outcome = page.locator('p.outcome');
    await outcome.filter({ hasNotText: /^(Terminate…)?$/ }).waitFor({ timeout: 60_000 });
    // B runs it and heartbeats its lease; nothing can reach B to stop it: the page says so, and nothing changed.
    expect(await outcome.textContent()).toMatch(
      new RegExp(
        `^Terminate failed — BACKPLANE_UNAVAILABLE: Cannot reach the owner of "${id}" .*try again later$`,
      ),
    );
    expect(await client.transfers.get(id)).toMatchObject({ state: 'IN_PROGRESS', owner: { nodeId: 'b' } });
    expect(browser.actions).toEqual([
      'POST /v1/endpoints/cities/rebuild',
      `POST /v1/transfers/${id}/terminate`,
    ]);
  });

  it("with the store's connections killed: the transfer and Nodes pages come back to the store's truth", {
    timeout: 90_000,
  }, async () => {
    await using cluster = await startCluster('store-killed', 50);
    const { a, b, storeDb } = cluster;
    const id = 'store-killed-copy';
    const before = await transferOwnedByB(cluster, id, 50);

    await using browser = await openConsoleBrowser();
    const { page } = browser;
    await page.goto(`${a.url}/console#/transfers/${id}`);
    const facts = page.locator('dl.facts');
    await facts.getByText(`b (${b.url})`).waitFor({ timeout: 30_000 });
    const nodes = await browser.context.newPage();
    await nodes.goto(`${a.url}/console#/nodes`);
    await nodes.locator('.page-head > p').filter({ hasText: '2 of 2 alive' }).waitFor({ timeout: 30_000 });

    const killed = await sql<{ n: number }>(
      testPostgresUrl(),
      `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
        WHERE datname = $1 AND pid <> pg_backend_pid()`,
      [storeDb.name],
    );
    expect(killed[0]!.n).toBeGreaterThan(0);

    // Both nodes reconnect; the pages refresh by themselves to what the store holds.
    const client = createClient({ controlUrl: a.url });
    await waitFor(async () => (await client.transfers.get(id)).progress !== null || null, {
      timeoutMs: 30_000,
      what: 'the control API to answer from the store again',
    });
    const status = page.getByRole('status').filter({ hasText: /refresh/i });
    await status.filter({ hasText: /^Refreshed every 2 s$/ }).waitFor({ timeout: 30_000 });
    const truth = await client.transfers.get(id);
    expect(truth).toMatchObject({ state: 'IN_PROGRESS', owner: { nodeId: 'b' }, epoch: before.epoch });
    await facts.getByText(`b (${b.url})`).waitFor();
    expect(await page.getByRole('button', { name: 'Terminate' }).isDisabled()).toBe(false);
    await nodes
      .locator('.page-head > p')
      .filter({ hasText: /^2 of 2 alive/ })
      .waitFor({ timeout: 30_000 });
    expect((await client.control.nodes()).every((n) => n.alive)).toBe(true);
    expect(browser.actions).toEqual([]);
  });
});
