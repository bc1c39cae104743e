/**
 * A logical-replication endpoint whose source goes away while it streams, on real app-server and api-server processes
 * and a private PostgreSQL with `wal_level=logical`: its walsender ended (`pg_terminate_backend` of the slot's
 * `active_pid`), then PostgreSQL restarted, with rows written throughout. The run (and, while a green is held, the
 * serving generation's follower — docs/generations.md) retries by itself and resumes from its checkpoint: the mirror
 * ends equal to the table in the same generation, no rebuild, and `GET /v1/endpoints` says it retries while
 * PostgreSQL is down — not that it failed.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { freePort, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { heldEndpointYaml, startHeldItems } from './held-replication.js';
import { call, localNode, type NodeProcess, startHostApiServer } from './helpers.js';
import { currentLsn, servedRows, tableRows } from './items-rows.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import {
  type EndpointView,
  generationStates,
  itemsOf,
  itemsTable,
  startItemsHost,
} from './replication-node.js';

const postgres = logicalPostgresPerFile();

/**
 * Writes to `items` until stopped or disposed: one transaction a row (an insert from id 1000 up, then an update of an
 * older row), its failures (PostgreSQL down, restarting) ignored — what was committed is what the table holds.
 */
function startWriter(
  url: string,
): AsyncDisposable & { stop: () => Promise<number>; committed: () => number } {
  let running = true;
  let committed = 0;
  const loop = (async () => {
    for (let id = 1000; running; id++) {
      try {
        await sql(url, "INSERT INTO items VALUES ($1, $1, 'written during the outage')", [id]);
        await sql(url, 'UPDATE items SET v = v + 1 WHERE id = $1', [(id % 100) + 1]);
        committed++;
      } catch {
        // down or restarting: the next one tries again
      }
      await delay(20);
    }
  })();
  const stop = async () => {
    running = false;
    await loop;
    return committed;
  };
  return {
    stop,
    committed: () => committed,
    async [Symbol.asyncDispose]() {
      await stop();
    },
  };
}

/**
 * Waits until `writer` has committed more than `than` writes: each opens a connection of its own, so how many fit
 * in a given time depends on the machine's load — the outages below wait for writes, not for time.
 */
const committedMoreThan = (writer: { committed: () => number }, than: number, what: string) =>
  waitFor(() => writer.committed() > than, { timeoutMs: 60_000, what });

/** Ends the walsender reading `slot`; resolves with how many it ended. */
const terminateWalsender = async (url: string, slot: string) =>
  (
    await sql<{ n: number }>(
      url,
      `SELECT count(pg_terminate_backend(active_pid, 10000))::int AS n FROM pg_replication_slots
        WHERE slot_name = $1 AND active_pid IS NOT NULL`,
      [slot],
    )
  )[0]!.n;

/** Waits until the slot is read again (by a new walsender). */
const slotReadAgain = (url: string, slot: string) =>
  waitFor(
    async () =>
      (
        await sql(url, 'SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL', [
          slot,
        ])
      ).length === 1,
    { timeoutMs: 60_000, what: `slot ${slot} to be read again` },
  );

/** Waits while PostgreSQL is down until `items` reports what `ready` looks for; a timeout shows what it reported. */
async function whileDown(
  node: NodeProcess,
  what: string,
  ready: (items: EndpointView) => boolean,
): Promise<EndpointView> {
  let last: EndpointView | null = null;
  try {
    return await waitFor(
      async () => {
        last = await itemsOf(node);
        return ready(last) ? last : null;
      },
      { timeoutMs: 60_000, what },
    );
  } catch (err) {
    const { phase, error, retry, follower } = last ?? ({} as Partial<EndpointView>);
    throw new Error(
      `${(err as Error).message}; it reported ${JSON.stringify({ phase, error, retry, follower })}`,
    );
  }
}

/**
 * Ends the walsender reading `slot` while rows are written, and waits until the slot is read again (by a new
 * walsender); resolves with how many writes were committed meanwhile.
 */
async function walsenderEndedUnderWrites(url: string, slot: string): Promise<number> {
  await using writer = startWriter(url);
  await committedMoreThan(writer, 0, 'a write before the walsender is ended');
  await waitFor(async () => (await terminateWalsender(url, slot)) === 1, {
    timeoutMs: 30_000,
    what: `the walsender of ${slot} to be ended`,
  });
  await slotReadAgain(url, slot);
  return writer.stop();
}

/**
 * Restarts PostgreSQL — a fast shutdown, then a start — with rows written before, while it is down (refused) and
 * after; `meanwhile` runs while it is down. Resolves with how many writes were committed.
 */
async function restartedUnderWrites(url: string, meanwhile: () => Promise<void>): Promise<number> {
  await using writer = startWriter(url);
  await committedMoreThan(writer, 0, 'a write before PostgreSQL stops');
  await postgres().stop('fast');
  try {
    await meanwhile();
  } finally {
    await postgres().start();
  }
  await committedMoreThan(writer, writer.committed(), 'a write after PostgreSQL restarted');
  return writer.stop();
}

describe('a replication endpoint whose source goes away while it streams', () => {
  it('defect: while PostgreSQL restarts under a streaming endpoint it is shown failed; it resumes in place and ends equal to the table', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir('sluice-repl-outage-');
    const url = await itemsTable(postgres(), 'outage');
    const apiPort = await freePort();
    // The held-replication YAML: manual switch, which only matters to a rebuild, and none is asked for here.
    const spec = { ...localNode('h1', dir.path), extraYaml: heldEndpointYaml(url, apiPort) };
    const slot = 'sluice_h1_items_source';
    await using host = await startItemsHost(spec, { apiPort, records: 100 });
    const { node, api } = host;
    const serving = host.streaming.servingCache;

    // Its walsender ended under it while rows are written: it reads its slot again and misses nothing.
    expect(await walsenderEndedUnderWrites(url, slot)).toBeGreaterThan(0);
    expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));

    // PostgreSQL restarted with rows written before, while it is down (refused) and after: the endpoint says it
    // retries — an outage it waits out — and never that it failed.
    const committed = await restartedUnderWrites(url, async () => {
      // Every phase it shows until it says it retries: its read may first reconnect in place (`starting`, the
      // stream ended and not yet refused) — a moment a loaded machine's sampling lands in — but never `failed`.
      const seen = new Set<string>();
      const down = await whileDown(node, 'the endpoint to say it retries', (items) => {
        seen.add(items.phase);
        return items.phase === 'retrying';
      });
      expect([...seen].filter((phase) => !['streaming', 'starting', 'retrying'].includes(phase))).toEqual([]);
      expect(down).toMatchObject({
        phase: 'retrying',
        error: { code: expect.any(String) },
        retry: { attempts: expect.any(Number) },
      });
      expect(down.retry!.attempts).toBeGreaterThanOrEqual(1);
    });
    expect(committed).toBeGreaterThan(0);
    await sql(url, "INSERT INTO items VALUES (5000, 5000, 'after the restart')");

    const expected = await tableRows(url);
    expect(await servedRows(api, await currentLsn(url))).toEqual(expected);
    const after = await waitFor(
      async () => {
        const items = await itemsOf(node);
        return items.phase === 'streaming' && items.records === expected.length ? items : null;
      },
      { timeoutMs: 60_000, what: 'the endpoint to stream again with every row' },
    );
    // Resumed in place: the same generation, from its checkpoint, nothing rebuilt; nothing says it retries.
    expect(after).toMatchObject({
      servingCache: serving,
      error: null,
      retry: null,
      decision: { decision: 'resume' },
    });
    const generations = (await call(`${node.url}/v1/endpoints/items/generations`)).body.generations as Array<{
      name: string;
    }>;
    expect(generations.map((g) => g.name)).toEqual([serving]);
  });

  it('while a green is held, the serving generation follows on after its walsender is ended and PostgreSQL restarts', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir('sluice-follower-outage-');
    await using started = await startHeldItems(postgres(), 'followeroutage', 'h2', dir.path);
    const { url, node, blue, green, api } = started;
    const servingSlot = 'sluice_h2_items_source';
    await using apiServer = await startHostApiServer(node);
    void apiServer;
    await waitFor(async () => ((await itemsOf(node)).follower?.phase === 'following' ? true : null), {
      timeoutMs: 30_000,
      what: 'the serving generation to follow',
    });

    // The follower's walsender ended while rows are written: it starts again from its own checkpoint.
    expect(await walsenderEndedUnderWrites(url, servingSlot)).toBeGreaterThan(0);
    expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));

    // PostgreSQL restarted: while it is down the follower says it retries, and why; so does the endpoint (the
    // run feeding the held green lost its source too).
    const committed = await restartedUnderWrites(url, async () => {
      const down = await whileDown(
        node,
        'the follower and the endpoint to say they retry',
        (items) => items.follower?.phase === 'retrying' && items.phase === 'retrying',
      );
      expect(down).toMatchObject({
        servingCache: blue,
        phase: 'retrying',
        follower: { cache: blue, phase: 'retrying', error: { code: expect.any(String) } },
      });
    });
    expect(committed).toBeGreaterThan(0);
    await sql(url, "INSERT INTO items VALUES (5000, 5000, 'after the restart')");

    // Readers get the serving generation, equal to the table; both generations follow again, none was added.
    const position = await currentLsn(url);
    const expected = await tableRows(url);
    expect(await servedRows(api, position)).toEqual(expected);
    const after = await waitFor(
      async () => {
        const items = await itemsOf(node);
        const r = items.replication;
        return items.follower?.phase === 'following' &&
          r?.lagBytes === 0 &&
          r.following?.lagBytes === 0 &&
          items.records === expected.length
          ? items
          : null;
      },
      { timeoutMs: 60_000, what: 'both generations to catch up' },
    );
    expect(after).toMatchObject({
      servingCache: blue,
      held: { cache: green },
      phase: 'held',
      error: null,
      retry: null,
      follower: { cache: blue, phase: 'following', error: null },
    });
    expect(await generationStates(node)).toEqual(
      [
        [blue, 'serving'],
        [green, 'held'],
      ].sort(),
    );

    // The held green followed too: promoted, it serves the same rows.
    const promoted = await call(`${node.url}/v1/endpoints/items/promote`, { method: 'POST' });
    expect(promoted.body).toMatchObject({ from: blue, to: green, changed: true });
    expect(await servedRows(api, position)).toEqual(expected);
  });
});
