/**
 * A green held (`switch: { mode: manual }`) over a logical-replication endpoint while its PostgreSQL is down, on a
 * real app-server process and a private PostgreSQL with `wal_level=logical`: the run feeding the held green and the
 * serving generation's follower both retry by themselves. What an operator reads meanwhile must stay true —
 * `GET /v1/endpoints`, its stream and the console keep showing the held green, why it is held, and when each of the
 * two tries again — and Promote, offered for it, works during the outage as after it.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createClient, type EndpointWatchView } from '@sluice/client';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openConsoleBrowser } from './console-browser.js';
import { startHeldItems } from './held-replication.js';
import { call, type NodeProcess } from './helpers.js';
import { tableRows } from './items-rows.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { type EndpointView, itemsOf } from './replication-node.js';

const postgres = logicalPostgresPerFile();
const BUILT = fileURLToPath(new URL('../dist/console/index.html', import.meta.url));

/** Waits until both generations followed the source to its end (nothing more to read, both committed it). */
const caughtUp = (node: NodeProcess) =>
  waitFor(
    async () => {
      const items = await itemsOf(node);
      const r = items.replication;
      return items.phase === 'held' &&
        items.follower?.phase === 'following' &&
        r?.lagBytes === 0 &&
        r.following?.lagBytes === 0
        ? items
        : null;
    },
    { timeoutMs: 60_000, what: 'the held green and the serving generation to catch up' },
  );

/** While PostgreSQL is down: waits until the run and the follower both retry; a timeout shows what was reported. */
async function bothRetrying(node: NodeProcess): Promise<EndpointView> {
  let last: EndpointView | null = null;
  try {
    return await waitFor(
      async () => {
        last = await itemsOf(node);
        return last.phase === 'retrying' &&
          last.follower?.phase === 'retrying' &&
          last.follower.retry?.nextAttemptAt != null
          ? last
          : null;
      },
      { timeoutMs: 60_000, what: 'the run and the follower to retry' },
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; it reported ${JSON.stringify(last)}`);
  }
}

/** The first picture the endpoint stream (`GET /v1/endpoints/stream`) sends of `items`. */
async function streamedItems(node: NodeProcess): Promise<EndpointWatchView> {
  const controller = new AbortController();
  try {
    for await (const event of createClient({ controlUrl: node.url }).control.watchEndpoints({
      signal: controller.signal,
    }))
      if (event.type === 'endpoints') return event.endpoints.find((e) => e.name === 'items')!;
    throw new Error('the endpoint stream ended before its first picture');
  } finally {
    controller.abort();
  }
}

describe('a held green while PostgreSQL is down', () => {
  it('defect: while the run feeding a held green retries, GET /v1/endpoints and its stream lose the held green, and the follower does not say when it retries', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir('sluice-held-outage-');
    await using started = await startHeldItems(postgres(), 'heldoutage', 'h1', dir.path);
    const { node, blue, green } = started;
    const before = await caughtUp(node);
    const reason = before.held!.reason;
    expect(before.held).toEqual({ cache: green, reason: expect.any(String) });

    await postgres().stop('fast');
    try {
      const down = await bothRetrying(node);
      // The run that fed the green is gone, the green is not: still held, for the same reason, and still the
      // generation the endpoint feeds.
      expect(down).toMatchObject({
        servingCache: blue,
        phase: 'retrying',
        error: { code: expect.any(String) },
        retry: { attempts: expect.any(Number) },
        held: { cache: green, reason },
        buildingCache: green,
        follower: {
          cache: blue,
          phase: 'retrying',
          error: { code: expect.any(String) },
          retry: { attempts: expect.any(Number), nextAttemptAt: expect.any(String) },
        },
      });
      expect(down.follower!.retry!.attempts).toBeGreaterThanOrEqual(1);
      expect(Number.isNaN(Date.parse(down.follower!.retry!.nextAttemptAt!))).toBe(false);
      // The stream (what the console reads) says the same.
      const streamed = await streamedItems(node);
      expect(streamed).toMatchObject({
        phase: 'retrying',
        held: { cache: green, reason },
        buildingCache: green,
      });
      expect(streamed.generations.find((g) => g.name === green)?.state).toBe('held');
      expect(streamed.follower?.retry?.attempts).toBeGreaterThanOrEqual(1);
    } finally {
      await postgres().start();
    }

    // Back: held again, nothing retries; Promote switches to it.
    const back = await caughtUp(node);
    expect(back).toMatchObject({ held: { cache: green, reason }, retry: null, follower: { retry: null } });
    const promoted = await call(`${node.url}/v1/endpoints/items/promote`, { method: 'POST' });
    expect(promoted.body).toMatchObject({ from: blue, to: green, changed: true });
  });

  it('defect: the console offers Promote for a green held while PostgreSQL is down, and the promote is refused', {
    timeout: 240_000,
  }, async () => {
    expect(existsSync(BUILT), 'the console is built (pnpm build)').toBe(true);
    await using dir = await tempDir('sluice-held-outage-console-');
    await using started = await startHeldItems(postgres(), 'heldoutageconsole', 'h2', dir.path);
    const { url, node, blue, green } = started;
    await using browser = await openConsoleBrowser();
    const reason = (await caughtUp(node)).held!.reason;
    const page = browser.page;
    await page.goto(`${node.url}/console`);
    const card = page.locator('article[data-endpoint="items"]');
    await card.waitFor({ timeout: 30_000 });
    const short = (name: string) => name.slice('items-'.length);

    await postgres().stop('fast');
    try {
      await bothRetrying(node);
      await card.locator('.card-head .phase', { hasText: 'retrying' }).waitFor({ timeout: 30_000 });
      // The endpoint's retry and the follower's, each with when it tries again.
      const retry = card.locator('[data-fact="retry"]');
      await retry.waitFor({ timeout: 10_000 });
      expect(await retry.textContent()).toMatch(/^retrying (in \d+ s|now): /);
      const follower = card.locator('[data-fact="follower"][data-phase="retrying"]');
      await follower.waitFor({ timeout: 10_000 });
      expect(await follower.textContent()).toMatch(/retrying (in \d+ s|now): .*\d+ failed attempts? so far/);
      expect(await card.locator('dt', { hasText: `while ${green} is fed` }).count()).toBe(1);
      // The held green, why it is held, and its Promote — which works while PostgreSQL is down.
      const held = card.getByRole('region', { name: 'Held generations' });
      await held.waitFor({ timeout: 10_000 });
      expect(await held.textContent()).toContain(reason);
      await held.getByRole('button', { name: `Promote ${short(green)}` }).click();
      await held.getByRole('button', { name: `Yes, promote ${short(green)}` }).click();
      await card.locator('.outcome', { hasText: `now serves ${short(green)}` }).waitFor({ timeout: 30_000 });
      await card.locator('.timeline li[data-cause="promote"]').waitFor({ timeout: 10_000 });
      await held.waitFor({ state: 'detached', timeout: 10_000 });
      expect((await itemsOf(node)).servingCache).toBe(green);
    } finally {
      await postgres().start();
    }

    // Back: the promoted green streams on from its own checkpoint, every row of the table in it.
    const rows = (await tableRows(url)).length;
    await card.locator('.card-head .phase', { hasText: 'streaming' }).waitFor({ timeout: 60_000 });
    const after = await waitFor(
      async () => {
        const items = await itemsOf(node);
        return items.phase === 'streaming' && items.records === rows ? items : null;
      },
      { timeoutMs: 60_000, what: 'the promoted green to stream' },
    );
    expect(after).toMatchObject({ servingCache: green, held: null, buildingCache: null, follower: null });
    expect(blue).not.toBe(green);
  });
});
