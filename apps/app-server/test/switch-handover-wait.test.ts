/**
 * The hand-over wait of a logical-replication endpoint's switch (docs/generations.md § The switch hands over at a
 * position, `switch.handoverWaitMs`), when the generation switched to cannot catch up in time — through a real
 * app-server and api-server process, a private PostgreSQL with `wal_level=logical`, and a writer committing to the
 * source table the whole time.
 *
 * The green is held back by a TCP proxy between the app-server and PostgreSQL that stops delivering its slot's
 * stream (slot-hold-proxy.ts) while the serving generation's own slot, the snapshots and the writer pass: the green
 * stands at the position it reached, the serving one goes on. (Holding the green's LMDB write lock from another
 * process would not do: cache commits are synchronous, so the app-server's whole thread — the serving generation's
 * follower and the control API with it — would wait on that lock.)
 *
 * A green held back behind the serving generation is never paused for: the serving one is paused only once the green
 * has caught up with its last commit. So here the switch waits in `catching-up` and the serving generation follows
 * throughout; the serving generation paused past the green and then put off after the wait is
 * packages/pipeline/src/endpoint/handover.test.ts.
 */
import { compareLsn } from '@sluice/pipeline';
import { freePort, sleep, startItemsWriter, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, type NodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import {
  type EndpointView,
  itemsOf,
  itemsTable,
  replicatedEndpointYaml,
  startItemsHost,
} from './replication-node.js';
import { lastGenerationOtherThan, readContinuously, stepsBack } from './served-positions.js';
import { type SlotHoldProxy, startSlotHoldProxy } from './slot-hold-proxy.js';

const postgres = logicalPostgresPerFile();

/** Big enough that a green's snapshot takes a while, during which the serving generation follows past it. */
const ROWS = 30_000;
/** The wait under test: short, so that holding the green for several of it keeps the test short. */
const HANDOVER_WAIT_MS = 1_500;

/** The two slot names of endpoint `items` on node `h1` (generation-slots.ts): the green takes the one blue does not. */
const SLOTS = ['sluice_h1_items_source', 'sluice_h1_items_source_b'] as const;

/**
 * A database with table `items` of {@link ROWS} rows, a proxy in front of its server, and an app-server (`switch`:
 * the endpoint's switch settings) plus an api-server reading it through that proxy; resolves once `items` streams.
 */
async function startItems(dir: string, database: string, switchYaml: string) {
  const url = await itemsTable(postgres(), database, { rows: ROWS, text: "repeat('x', 300)" });
  // What is started so far, stopped newest first — also when starting the rest fails.
  const started: AsyncDisposable[] = [];
  const stopAll = async () => {
    for (const handle of started.reverse()) await handle[Symbol.asyncDispose]();
  };
  try {
    const proxy = await startSlotHoldProxy(postgres().port);
    started.push(proxy);
    const apiPort = await freePort();
    const host = await startItemsHost(
      {
        ...localNode('h1', dir),
        extraYaml: replicatedEndpointYaml(proxy.route(url), {
          apiPort,
          keepGenerations: true,
          switch: switchYaml,
        }),
        pipeline: { commitEveryRecords: 1000, commitEveryMs: 50 },
      },
      { apiPort, records: ROWS, timeoutMs: 120_000 },
    );
    started.push(host);
    const writer = startItemsWriter(url, ROWS);
    started.push(writer);
    return {
      url,
      api: host.api,
      node: host.node,
      proxy,
      writer,
      greenSlot: SLOTS.find((slot) => slot !== host.streaming.replication!.slot)!,
      [Symbol.asyncDispose]: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/** Waits until the serving generation (as `GET /v1/endpoints` reports it) has committed past `lsn`. */
async function servedPast(node: NodeProcess, lsn: string, what: string): Promise<EndpointView> {
  return waitFor(
    async () => {
      const items = await itemsOf(node);
      const committed = items.replication?.committedLsn ?? null;
      return committed !== null && compareLsn(committed, lsn) > 0 ? items : null;
    },
    { timeoutMs: 30_000, what },
  );
}

/**
 * Rebuilds `items` (manual switch), waits for the green to be held and streaming, then holds its stream back until it
 * stands still while the serving generation follows the writer past it. Resolves with the green, where it stands and
 * what the serving generation had committed past it (as `GET /v1/endpoints` said) — the state a promote cannot hand
 * over from within the wait.
 */
async function heldGreenBehind(items: {
  node: NodeProcess;
  proxy: SlotHoldProxy;
  greenSlot: string;
}): Promise<{ green: string; greenAt: string; servedAt: string }> {
  const { node, proxy, greenSlot } = items;
  expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
  const green = (
    await waitFor(
      async () => {
        const view = await itemsOf(node);
        return view.held && view.replication?.following?.committedLsn ? view.held : null;
      },
      { timeoutMs: 180_000, what: 'the rebuilt generation to be held and streaming' },
    )
  ).cache;
  await waitFor(() => proxy.streams(greenSlot) > 0, { what: 'the green’s stream through the proxy' });

  // Held back: the green stands where it is while the serving generation follows the writer past it.
  proxy.hold(greenSlot);
  const greenAt = await waitFor(
    async () => {
      const first = (await itemsOf(node)).replication?.following?.committedLsn;
      await sleep(500);
      const second = (await itemsOf(node)).replication?.following?.committedLsn;
      return first && first === second ? second : null;
    },
    { timeoutMs: 30_000, what: 'the held green to stand still' },
  );
  const served = await servedPast(node, greenAt, 'the serving generation to follow past the held green');
  return { green, greenAt, servedAt: served.replication!.committedLsn! };
}

describe('the switch hand-over when the generation switched to cannot catch up', () => {
  it('a rebuilt green held back past the hand-over wait: the serving generation keeps following, the switch is made once the green caught up, and the served position never goes back', {
    timeout: 300_000,
  }, async () => {
    await using dir = await tempDir('sluice-handover-wait-');
    await using items = await startItems(dir.path, 'handoverwait', `{ handoverWaitMs: ${HANDOVER_WAIT_MS} }`);
    const { node, proxy, greenSlot } = items;
    const blue = (await itemsOf(node)).servingCache!;
    const reader = readContinuously(items.api);
    let green: string;
    let servedWhileHeld: string;
    try {
      await waitFor(() => items.writer.written >= 20 && reader.answers.length >= 5, {
        timeoutMs: 30_000,
        what: 'writes and answers before the rebuild',
      });
      // The green's stream is held from its very first byte: it stands at its snapshot's consistent point.
      proxy.hold(greenSlot);
      expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
      // Its stream starts only once its snapshot is done and the switch was asked for (and found it behind).
      await waitFor(() => proxy.streams(greenSlot) > 0, {
        timeoutMs: 180_000,
        what: 'the green to finish its snapshot and start streaming (held)',
      });
      const heldAt = (await itemsOf(node)).replication!.committedLsn!;
      // Held for several hand-over waits: a switch would have been put off (or made, wrongly) by now.
      await sleep(HANDOVER_WAIT_MS * 3);
      const during = await servedPast(
        node,
        heldAt,
        'the serving generation to follow on while the green is held',
      );
      expect(during.servingCache, 'the alias stays on the serving generation').toBe(blue);
      expect(during.follower, 'the serving generation follows its source').toMatchObject({
        cache: blue,
        phase: 'following',
      });
      servedWhileHeld = during.replication!.committedLsn!;
      await waitFor(
        () => {
          const last = reader.answers.at(-1);
          return last !== undefined && last.cache === blue && compareLsn(last.lsn, servedWhileHeld) >= 0;
        },
        { timeoutMs: 30_000, what: 'readers to get the position served while the green is held' },
      );

      proxy.release(greenSlot);
      green = await waitFor(lastGenerationOtherThan(reader.answers, blue), {
        timeoutMs: 120_000,
        what: 'the green to catch up and take the alias',
      });
      const at = reader.answers.length;
      await waitFor(() => reader.answers.length >= at + 20, { what: 'answers from the green' });
    } finally {
      await items.writer.stop();
      await reader.stop();
    }

    // The switch was asked for while the green was held, found it behind, and waited.
    expect(node.child.output()).toMatch(/switch waits: the generation switched to is behind the serving one/);
    const answers = reader.answers;
    expect(answers.some((a) => a.cache === blue && compareLsn(a.lsn, servedWhileHeld) >= 0)).toBe(true);
    expect(answers.at(-1)!.cache).toBe(green);
    expect(stepsBack(answers), 'sluice-position of the answers').toEqual([]);
    const history = (await call(`${node.url}/v1/endpoints/items/generations`)).body.history;
    expect(history[0]).toMatchObject({ from: blue, to: green, cause: 'rebuild' });
    expect((await itemsOf(node)).follower, 'the old serving generation stopped following').toBeNull();
  });

  it('defect: a promote that could not hand over in time named the green’s position but not the one it had to reach', {
    timeout: 300_000,
  }, async () => {
    await using dir = await tempDir('sluice-promote-target-');
    await using items = await startItems(
      dir.path,
      'promotetarget',
      `{ mode: manual, handoverWaitMs: ${HANDOVER_WAIT_MS} }`,
    );
    try {
      const { green, greenAt, servedAt } = await heldGreenBehind(items);
      const refused = await call(`${items.node.url}/v1/endpoints/items/promote`, { method: 'POST' });
      expect(refused.status).toBe(504);
      expect(refused.body).toMatchObject({ code: 'ENDPOINT_TIMEOUT', endpoint: 'items', generation: green });
      // The green's position and the one it had to reach — the serving generation's last commit when the promote
      // asked, past the green's and at or past what the serving generation had committed before — side by side.
      expect(refused.body.committed).toBe(`items.source=${greenAt}`);
      const target = /^items\.source=([0-9A-F]+\/[0-9A-F]+)$/.exec(refused.body.target ?? '')?.[1];
      expect(target, `the problem's target (${JSON.stringify(refused.body)})`).toBeDefined();
      expect(compareLsn(target!, greenAt)).toBeGreaterThan(0);
      expect(compareLsn(target!, servedAt)).toBeGreaterThanOrEqual(0);
      expect(refused.body.detail).toContain(`(committed items.source=${greenAt})`);
      expect(refused.body.detail).toContain(`items.source=${target}`);
    } finally {
      await items.writer.stop();
    }
  });

  it('a promote of a held green that cannot catch up answers 504 ENDPOINT_TIMEOUT and moves nothing; promoted again once it caught up, it switches', {
    timeout: 300_000,
  }, async () => {
    await using dir = await tempDir('sluice-promote-timeout-');
    await using items = await startItems(
      dir.path,
      'promotetimeout',
      `{ mode: manual, handoverWaitMs: ${HANDOVER_WAIT_MS} }`,
    );
    const { node, proxy, greenSlot } = items;
    const blue = (await itemsOf(node)).servingCache!;
    const reader = readContinuously(items.api);
    let green: string;
    try {
      green = (await heldGreenBehind(items)).green;

      const refused = await call(`${node.url}/v1/endpoints/items/promote`, { method: 'POST' });
      expect(refused.status).toBe(504);
      expect(refused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(refused.body).toMatchObject({ status: 504, code: 'ENDPOINT_TIMEOUT' });
      expect(refused.body.detail).toContain(green);
      expect(refused.body.detail).toContain(`within ${HANDOVER_WAIT_MS} ms`);
      expect(refused.body.detail).toContain('switch.handoverWaitMs');
      expect(refused.body.detail).toContain('the alias stays');

      // Nothing moved: the alias, the hold and what readers get are as before; the serving generation follows on.
      const after = await itemsOf(node);
      expect(after.servingCache).toBe(blue);
      expect(after.held?.cache).toBe(green);
      const history = (await call(`${node.url}/v1/endpoints/items/generations`)).body.history;
      expect(history.some((h: { cause: string }) => h.cause === 'promote')).toBe(false);
      const resumed = await servedPast(
        node,
        after.replication!.committedLsn!,
        'the serving generation to keep following after the refused promote',
      );
      expect(resumed.follower).toMatchObject({ cache: blue, phase: 'following' });
      await waitFor(
        () => {
          const last = reader.answers.at(-1);
          return (
            last !== undefined &&
            last.cache === blue &&
            compareLsn(last.lsn, resumed.replication!.committedLsn!) >= 0
          );
        },
        {
          timeoutMs: 30_000,
          what: 'readers to get the serving generation, advancing, after the refused promote',
        },
      );

      // Released, the green catches up; a promote then hands over within the wait.
      proxy.release(greenSlot);
      await waitFor(
        async () => {
          const view = await itemsOf(node);
          const greenLsn = view.replication?.following?.committedLsn;
          const blueLsn = view.replication?.committedLsn;
          return greenLsn && blueLsn && compareLsn(greenLsn, blueLsn) >= 0;
        },
        { timeoutMs: 60_000, what: 'the released green to catch up with the serving generation' },
      );
      const promoted = await call(`${node.url}/v1/endpoints/items/promote`, { method: 'POST' });
      expect(promoted.status, JSON.stringify(promoted.body)).toBe(200);
      expect(promoted.body).toMatchObject({ from: blue, to: green, cause: 'promote', changed: true });
      await waitFor(() => reader.answers.at(-1)?.cache === green, {
        timeoutMs: 30_000,
        what: 'the api-server to answer from the promoted generation',
      });
      const at = reader.answers.length;
      await waitFor(() => reader.answers.length >= at + 20, { what: 'answers from the promoted generation' });
    } finally {
      await items.writer.stop();
      await reader.stop();
    }
    expect(reader.answers.at(-1)!.cache).toBe(green);
    expect(stepsBack(reader.answers), 'sluice-position of the answers').toEqual([]);
  });
});
