/**
 * A rolling restart done by the book behind a load balancer: two api-servers of one host behind a round-robin TCP
 * balancer that health-checks `/readyz` every 100 ms, 16 clients on keep-alive connections through it (lookups,
 * queries, change feeds), and each api-server in turn stopped (SIGTERM, wait for its exit) and started again (wait
 * until the balancer sees it ready). Not one request may fail, and every feed resumes with `Last-Event-ID` without a
 * gap — the promise a switch keeps, kept by a restart too.
 */
import { Agent } from 'node:http';
import {
  type ChildHandle,
  freePort,
  httpCall,
  seededRandom,
  spawnTs,
  startBalancer,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { range, startFeedWriter } from './feed-harness.js';
import { API_BIN, writeConfig } from './helpers.js';
import { SseConnection } from './sse.js';

const REQUEST_CLIENTS = 12;
const FEED_CLIENTS = 4;
/** Ids the writer streams during the restart (one upsert each), after the 50 records of the first generation. */
const STREAM = { commits: 300, perCommit: 2, everyMs: 60, from: 1_001 } as const;
/** How long a feed's connect may take before it counts as unanswered (a bound, not a measure). */
const CONNECT_BOUND_MS = 10_000;
const STREAMED_IDS = range(STREAM.from, STREAM.from + STREAM.commits * STREAM.perCommit - 1);

/** An api-server child on a fixed port (a restart comes back where the balancer expects it). */
async function spawnOnPort(config: string, port: number): Promise<ChildHandle> {
  const child = spawnTs(API_BIN, ['--config', config], { env: { SLUICE_API_PORT: String(port) } });
  await child.waitForLine(/api-server listening/, 60_000);
  return child;
}

/** A client issuing lookups and queries on its own keep-alive connection until `running()` is false. */
async function requestClient(
  base: string,
  seed: number,
  running: () => boolean,
  failures: string[],
): Promise<number> {
  const rng = seededRandom(seed);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  let sent = 0;
  try {
    while (running()) {
      const lookup = rng.chance(0.5);
      const answer = lookup
        ? await httpCall('GET', `${base}/v1/endpoints/items/records/${rng.int(1, 50)}`, agent)
        : await httpCall('POST', `${base}/v1/endpoints/items/query`, agent, { $limit: rng.int(1, 20) });
      sent += 1;
      if (typeof answer === 'string') failures.push(`${lookup ? 'lookup' : 'query'}: ${answer}`);
      else if (answer.status !== 200)
        failures.push(`${lookup ? 'lookup' : 'query'}: ${answer.status} ${answer.body.slice(0, 200)}`);
    }
  } finally {
    agent.destroy();
  }
  return sent;
}

/** `promise`, or null when it has not settled within {@link CONNECT_BOUND_MS}. */
async function bounded<T>(promise: Promise<T>): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), CONNECT_BOUND_MS);
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** What one feed subscriber saw: the streamed ids it received (in order, repeats kept), its connects. */
interface FeedRun {
  ids: number[];
  connects: number;
}

/**
 * A change-feed subscriber: follows `items` through the balancer, and whenever its feed ends reconnects with the
 * last event id it got (an end before it got any id is a feed cut without a resumable id: a failure).
 */
async function feedClient(
  base: string,
  run: FeedRun,
  running: () => boolean,
  failures: string[],
): Promise<void> {
  const collect = (events: SseConnection['events']) => {
    for (const event of events) {
      const id = (event.data as { key?: unknown[] } | null)?.key?.[0];
      if (event.event === 'upsert' && typeof id === 'number' && id >= STREAM.from) run.ids.push(id);
    }
  };
  let lastId: string | undefined;
  while (running()) {
    let feed: SseConnection | null;
    try {
      feed = await bounded(
        SseConnection.open(
          `${base}/v1/endpoints/items/changes`,
          lastId === undefined ? {} : { 'last-event-id': lastId },
        ),
      );
    } catch (err) {
      failures.push(`feed connect: ${(err as Error).message}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
      continue;
    }
    if (feed === null) {
      // Neither answered nor refused: this subscriber is stuck (the balancer's disposal ends the request).
      failures.push('feed connect: no answer');
      return;
    }
    run.connects += 1;
    let seen = 0;
    while (!feed.closed && running()) {
      collect(feed.events.slice(seen));
      seen = feed.events.length;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    collect(feed.events.slice(seen));
    if (feed.lastId !== undefined) lastId = feed.lastId;
    if (!feed.closed) {
      feed.kill();
      return;
    }
    if (lastId === undefined) failures.push('feed cut before it sent a resumable id');
  }
}

describe('a rolling restart of the api-servers behind a load balancer', () => {
  it('loses no request and no feed event while both api-servers restart one at a time', async () => {
    await using dir = await tempDir('sluice-api-rolling-');
    await using writer = await startFeedWriter(dir);
    const config = await writeConfig(dir.path, { dataDir: writer.root, logLevel: 'info' });
    const ports = [await freePort(), await freePort()];
    const servers = await Promise.all(ports.map((port) => spawnOnPort(config, port)));
    await using _servers = {
      [Symbol.asyncDispose]: async () => {
        await Promise.all(servers.map((server) => server.stop('SIGTERM', 15_000)));
      },
    };
    await using lb = await startBalancer(ports, { checkMs: 100 });
    await waitFor(() => lb.healthy().length === 2, { timeoutMs: 30_000, what: 'both backends ready' });

    const failures: string[] = [];
    let running = true;
    const requests = Array.from({ length: REQUEST_CLIENTS }, (_, i) =>
      requestClient(lb.url, 7_000 + i, () => running, failures),
    );
    const runs: FeedRun[] = Array.from({ length: FEED_CLIENTS }, () => ({ ids: [], connects: 0 }));
    const feeds = runs.map((run) => feedClient(lb.url, run, () => running, failures));
    // Every feed is connected (it answered 200 through the balancer) before the stream starts.
    await waitFor(() => runs.every((run) => run.connects > 0), { timeoutMs: 20_000, what: 'the feeds' });
    const stream = writer.run({ op: 'stream', gen: 1, ...STREAM });

    const exits = [];
    for (const [i, port] of ports.entries()) {
      servers[i]!.kill('SIGTERM');
      exits.push(await servers[i]!.exited);
      servers[i] = await spawnOnPort(config, port);
      await waitFor(() => lb.healthy().includes(port), { timeoutMs: 30_000, what: `${port} ready again` });
    }
    await stream;
    // The feeds catch up with the last commits (or, missing some, are judged once this gives up), then all stop.
    await waitFor(() => runs.every((run) => run.ids.length >= STREAMED_IDS.length), {
      timeoutMs: 10_000,
      what: 'every feed to get every streamed id',
    }).catch(() => undefined);
    running = false;
    const sent = await Promise.all(requests);
    await Promise.all(feeds);

    expect(exits).toEqual([
      { code: 0, signal: null },
      { code: 0, signal: null },
    ]);
    expect(sent.every((count) => count > 0)).toBe(true);
    expect(lb.refused).toBe(0);
    expect(failures).toEqual([]);
    for (const run of runs) {
      expect(run.connects).toBeGreaterThan(1); // its server stopped under it at least once
      expect(STREAMED_IDS.filter((id) => !run.ids.includes(id))).toEqual([]); // no gap
      expect(run.ids.length).toBe(STREAMED_IDS.length); // no event twice
    }
  }, 90_000);
});
