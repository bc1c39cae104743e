/**
 * What `GET /v1/endpoints` and `/metrics` say while an endpoint's run waits for its replication slot to be released
 * by another process (the source's `slotWaitMs`, 15 s in an app-server): a real app-server process, a private
 * PostgreSQL with `wal_level=logical`, and a real `pg_recvlogical` streaming the endpoint's slot meanwhile — so
 * nothing the endpoint runs can stream it.
 */
import type { ChildProcess } from 'node:child_process';
import { sleep, sql, takeReplicationSlot, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openConsoleBrowser } from './console-browser.js';
import { startHeldItems } from './held-replication.js';
import { call, localNode, type NodeProcess, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import {
  type EndpointView,
  itemsOf,
  itemsStreaming,
  itemsTable,
  replicatedEndpointYaml,
} from './replication-node.js';

const postgres = logicalPostgresPerFile();

/** The slot of endpoint `items` on node `h5`. */
const SLOT = 'sluice_h5_items_source';

/** `items` as `GET /v1/endpoints` shows it, with the slot it waits for. */
type WaitingView = EndpointView & {
  slotWait: { slot: string; since: string; until: string; activePid: number | null } | null;
};

/** The phase `sluice_endpoint_phase` says `items` is in (the label whose value is 1), or null. */
async function metricPhase(node: NodeProcess): Promise<string | null> {
  const text = (await call(`${node.url}/metrics`)).body as string;
  const line = text
    .split('\n')
    .find(
      (l) => l.startsWith('sluice_endpoint_phase{') && l.includes('endpoint="items"') && l.endsWith(' 1'),
    );
  return line === undefined ? null : (/phase="([^"]+)"/.exec(line)?.[1] ?? null);
}

describe('an endpoint whose run waits for its replication slot', () => {
  it('defect: while its run waited for a slot another process streams, the endpoint read phase streaming with retry null', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-slot-wait-');
    const url = await itemsTable(postgres(), 'slotwait');
    await using node = await startNodeProcess({
      ...localNode('h5', dir.path),
      extraYaml: replicatedEndpointYaml(url),
    });
    expect((await itemsStreaming(node, { records: 100 })).replication?.slot).toBe(SLOT);

    const takenAt = Date.now();
    const { child, walsender } = await takeReplicationSlot(url, SLOT);
    let holder: ChildProcess | null = child;
    try {
      // Its stream ended: the run failed, and is retried after the back-off.
      await waitFor(async () => (await itemsOf(node)).retry?.nextAttemptAt, {
        timeoutMs: 30_000,
        what: 'the endpoint to retry its run',
      });
      // From here until pg_recvlogical lets go nothing of this endpoint can stream the slot: it never says it streams.
      const samples: WaitingView[] = [];
      const watchUntil = Date.now() + 12_000;
      while (Date.now() < watchUntil) {
        samples.push((await itemsOf(node)) as WaitingView);
        await sleep(200);
      }
      const streaming = samples.filter((s) => s.phase === 'streaming');
      expect(streaming, `samples that say it streams: ${JSON.stringify(streaming[0])}`).toEqual([]);

      // The run started again waits for the slot: which one, since when, until when, and who streams it. It is the
      // attempt under way of the retry: still `retrying`, with the failure it retries after and no next attempt due.
      const waiting = await waitFor(
        async () => {
          const before = (await itemsOf(node)) as WaitingView;
          const metric = await metricPhase(node);
          const after = (await itemsOf(node)) as WaitingView;
          return before.slotWait && after.slotWait && before.phase === after.phase && metric === after.phase
            ? after
            : null;
        },
        { timeoutMs: 30_000, intervalMs: 100, what: 'the endpoint to say it waits for its slot' },
      );
      expect(waiting.phase).toBe('retrying');
      expect(waiting.retry).toMatchObject({ attempts: expect.any(Number), nextAttemptAt: null });
      expect(waiting.retry!.attempts).toBeGreaterThanOrEqual(1);
      expect(waiting.error?.code).toBe('SOURCE_FAILED');
      expect(waiting.slotWait).toMatchObject({ slot: SLOT, activePid: walsender });
      const since = Date.parse(waiting.slotWait!.since);
      expect(since).toBeGreaterThanOrEqual(takenAt);
      expect(since).toBeLessThanOrEqual(Date.now());
      // The app-server's slotWaitMs: the wait gives up (and is retried) 15 s after it began.
      expect(Date.parse(waiting.slotWait!.until) - since).toBe(15_000);

      // Given back, the slot streams again: nothing waits, nothing retries, and the metric says so too.
      holder.kill('SIGTERM');
      holder = null;
      await sql(url, "INSERT INTO items VALUES (101, 101, 'after the wait')");
      const streams = (await waitFor(
        async () => {
          const items = (await itemsOf(node)) as WaitingView;
          return items.records === 101 &&
            items.phase === 'streaming' &&
            (await metricPhase(node)) === 'streaming'
            ? items
            : null;
        },
        { timeoutMs: 90_000, what: 'the endpoint to stream again once the slot is free' },
      )) as WaitingView;
      expect(streams.slotWait).toBeNull();
      expect(streams.retry).toBeNull();
    } finally {
      holder?.kill('SIGKILL');
    }
  });

  it("defect: the console did not show that an endpoint's run waits for its slot, nor who holds it", {
    timeout: 180_000,
  }, async () => {
    // Its own node id, so its own slot: slot names are PostgreSQL-wide, and the test above leaves its slot behind.
    const slot = 'sluice_h6_items_source';
    await using dir = await tempDir('sluice-slot-wait-console-');
    const url = await itemsTable(postgres(), 'slotwaitconsole');
    await using node = await startNodeProcess({
      ...localNode('h6', dir.path),
      extraYaml: replicatedEndpointYaml(url),
    });
    expect((await itemsStreaming(node, { records: 100 })).replication?.slot).toBe(slot);
    await using browser = await openConsoleBrowser();
    const page = browser.page;
    await page.goto(`${node.url}/console`);
    const card = page.locator('article[data-endpoint="items"]');
    await card.locator('.phase', { hasText: 'streaming' }).first().waitFor({ timeout: 30_000 });
    const fact = card.locator('[data-fact="slot-wait"]');
    expect(await fact.count()).toBe(0);

    const { child, walsender } = await takeReplicationSlot(url, slot);
    let holder: ChildProcess | null = child;
    try {
      // The run retried meanwhile waits for the slot (15 s at a time, again after each back-off): the card says so.
      await fact.waitFor({ timeout: 60_000 });
      const text = await fact.textContent();
      expect(text).toContain(`waiting for slot ${slot}, held by PostgreSQL backend ${walsender}, since `);
      expect(text).toContain(', gives up at ');
      // Since and until of one wait, as the API gives them: 15 s apart.
      const [since, until] = await fact
        .locator('time')
        .evaluateAll((times) => times.map((t) => Date.parse(t.getAttribute('datetime') ?? '')));
      expect(until! - since!).toBe(15_000);

      // Given back, the slot streams again and the card no longer says it waits.
      holder.kill('SIGTERM');
      holder = null;
      await waitFor(async () => (await itemsOf(node)).phase === 'streaming', {
        timeoutMs: 90_000,
        what: 'the endpoint to stream again once the slot is free',
      });
      await fact.waitFor({ state: 'detached', timeout: 10_000 });
    } finally {
      holder?.kill('SIGKILL');
    }
  });
  it("defect: while the serving generation's follower waited for its slot another process streams, it read phase following", {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-follower-slot-wait-');
    await using started = await startHeldItems(postgres(), 'followerwait', 'h6', dir.path);
    const { url, node, blue } = started;
    const followerSlot = 'sluice_h6_items_source';
    await sql(url, "INSERT INTO items VALUES (101, 101, 'while held')");
    // Followed up to that write before the slot is taken: a write pg_recvlogical reads (and confirms) first is gone
    // from the slot, so the follower rightly cannot resume there and stands ("replication slot … is confirmed at …,
    // past the cache's …") instead of waiting for the slot. Any commit of the follower (`lastCommit`) is not enough:
    // on a loaded machine its first commit can come before it applied the write.
    await waitFor(
      async () => {
        const items = await itemsOf(node);
        return items.follower?.phase === 'following' && items.follower.lastCommit && items.records === 101
          ? items.follower
          : null;
      },
      { timeoutMs: 30_000, what: 'the serving generation to follow the write made while held' },
    );

    await using browser = await openConsoleBrowser();
    await browser.page.goto(`${node.url}/console`);
    const card = browser.page.locator('article[data-endpoint="items"]');
    await card.locator('[data-fact="follower"][data-phase="following"]').waitFor({ timeout: 30_000 });

    const takenAt = Date.now();
    const { child, walsender } = await takeReplicationSlot(url, followerSlot);
    let holder: ChildProcess | null = child;
    try {
      type FollowerView = NonNullable<EndpointView['follower']> & {
        slotWait: { slot: string; since: string; until: string; activePid: number | null } | null;
      };
      const followerOf = async () => (await itemsOf(node)).follower as FollowerView | null;
      // Its run failed and is retried; from then on, while pg_recvlogical holds the slot, it never says it follows.
      await waitFor(async () => (await followerOf())?.retry?.nextAttemptAt, {
        timeoutMs: 30_000,
        what: 'the follower to retry its run',
      });
      const samples: FollowerView[] = [];
      const watchUntil = Date.now() + 12_000;
      while (Date.now() < watchUntil) {
        const follower = await followerOf();
        if (follower) samples.push(follower);
        await sleep(200);
      }
      const following = samples.filter((s) => s.phase === 'following');
      expect(following, `samples that say it follows: ${JSON.stringify(following[0])}`).toEqual([]);
      const waiting = await waitFor(
        async () => ((await followerOf())?.slotWait ? await followerOf() : null),
        {
          timeoutMs: 30_000,
          intervalMs: 100,
          what: 'the follower to say it waits for its slot',
        },
      );
      expect(waiting).toMatchObject({ cache: blue, phase: 'retrying', retry: { nextAttemptAt: null } });
      expect(waiting!.slotWait).toMatchObject({ slot: followerSlot, activePid: walsender });
      expect(Date.parse(waiting!.slotWait!.since)).toBeGreaterThanOrEqual(takenAt);
      // The console (open since before the slot was taken) says it on the card, beside the follower: which slot, and
      // who holds it. A wait lasts the source's slotWaitMs (15 s) and comes back after each back-off.
      const wait = card.locator('[data-fact="follower-slot-wait"]');
      await wait.waitFor({ timeout: 60_000 });
      const text = await wait.textContent();
      expect(text).toContain(followerSlot);
      expect(text).toContain(`PostgreSQL backend ${walsender}`);

      // Given back, it follows again and the wait is gone.
      holder.kill('SIGTERM');
      holder = null;
      await sql(url, "INSERT INTO items VALUES (102, 102, 'after the wait')");
      const again = await waitFor(
        async () => {
          const follower = await followerOf();
          return follower?.phase === 'following' && follower.slotWait === null && follower.retry === null
            ? follower
            : null;
        },
        { timeoutMs: 90_000, what: 'the follower to follow again once the slot is free' },
      );
      expect(again.cache).toBe(blue);
    } finally {
      holder?.kill('SIGKILL');
    }
  });
});
