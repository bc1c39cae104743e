/**
 * Change feeds resumed the hard ways: a subscriber that stopped reading is cut off while the endpoint switches, and
 * one comes back with a token of a generation garbage collection has deleted. Either way the local copy it rebuilds
 * from the events equals the endpoint's records: no lost delete, no stale upsert.
 */
import { waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { collect, del, range, startFeedApi, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { spawnApiServer, writeConfig } from './helpers.js';
import { applyFeed, queryAll, SseConnection } from './sse.js';

const feedUrl = (base: string) => `${base}/v1/endpoints/items/changes`;

describe('change feeds resumed', () => {
  it('a slow reader cut off across a switch resumes from its last id and converges on the new generation', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    const configPath = await writeConfig(dir.path, {
      dataDir: writer.root,
      api: { changes: { bufferBytes: 1024 * 1024, heartbeatMs: 200 } },
    });
    // Its own process, as in production: the reader here must not share the server's event loop.
    await using api = await spawnApiServer(configPath);
    const slow = await SseConnection.open(feedUrl(api.url));
    await slow.waitForEvent((e) => e.event === 'live');
    slow.res.pause();
    // ~12 MB on blue, a switch to a green that drops and changes records, ~12 MB and deletes on green.
    await writer.run({
      op: 'stream',
      commits: 30,
      perCommit: 40,
      everyMs: 20,
      from: 1000,
      cycle: 200,
      gen: 7,
      pad: 10_000,
    });
    const green = await writer.run({
      op: 'rebuild',
      records: [...range(1, 40).map((id) => item(id, 2)), ...range(1000, 1100).map((id) => item(id, 3))],
    });
    await writer.run({
      op: 'stream',
      commits: 30,
      perCommit: 40,
      everyMs: 20,
      from: 2000,
      cycle: 200,
      gen: 8,
      pad: 10_000,
    });
    await writer.run({ op: 'commit', ops: range(2000, 2010).map(del) });
    await waitFor(
      async () =>
        /^sluice_api_change_cutoffs_total 1$/m.test(await (await fetch(`${api.url}/metrics`)).text()),
      { timeoutMs: 30_000, what: 'the slow reader cut off' },
    );
    slow.res.resume();
    await waitFor(() => slow.closed, { timeoutMs: 30_000, what: 'the rest of its stream read' });
    expect(slow.lastId).toBeDefined();

    const resumed = await SseConnection.open(feedUrl(api.url), { 'last-event-id': slow.lastId! });
    const { records, cache } = await queryAll(api.url, 'items');
    expect(cache).toBe(green);
    await waitFor(() => applyFeed(resumed.events, applyFeed(slow.events)).size === records.size, {
      timeoutMs: 30_000,
      what: 'the resumed feed to reach the endpoint',
    });
    expect(applyFeed(resumed.events, applyFeed(slow.events))).toEqual(records);
    // It went through the switch from where it was cut off, not through a reset.
    expect([...slow.events, ...resumed.events].some((e) => e.event === 'switch')).toBe(true);
    expect(resumed.events.some((e) => e.event === 'reset')).toBe(false);
    resumed.kill();
  }, 180_000);

  it('a token of a garbage-collected generation gets reset {generation-gone}, the snapshot, then changes', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root);
    const sub = await SseConnection.open(feedUrl(api.url));
    await sub.waitForEvent((e) => e.event === 'live');
    await writer.run({ op: 'commit', ops: [upsert(item(7, 5)), del(3)] });
    await sub.waitForEvent((e) => e.event === 'commit');
    const token = sub.lastId!;
    const blue = (sub.events.find((e) => e.event === 'live')!.data as { generation: string }).generation;
    sub.kill();
    await writer.run({ op: 'rebuild', records: range(1, 30).map((id) => item(id, 2)) });
    await writer.run({ op: 'rebuild', records: range(5, 60).map((id) => item(id, 3)) });
    await writer.run({ op: 'commit', ops: [del(10)] });
    // Collection skips a generation a reader still has open: the api-server closes blue once it has switched.
    await collect(writer, blue);

    const again = await SseConnection.open(feedUrl(api.url), { 'last-event-id': token });
    await again.waitForEvent((e) => e.event === 'live');
    expect(again.events[0]).toEqual({ event: 'reset', data: { reason: 'generation-gone' } });
    expect(applyFeed(again.events, applyFeed(sub.events))).toEqual(
      (await queryAll(api.url, 'items')).records,
    );
    await writer.run({ op: 'commit', ops: [del(11), upsert(item(99, 4))] });
    await again.waitForEvent((e) => e.event === 'commit');
    expect(applyFeed(again.events, applyFeed(sub.events))).toEqual(
      (await queryAll(api.url, 'items')).records,
    );
    again.kill();
  }, 120_000);
});
