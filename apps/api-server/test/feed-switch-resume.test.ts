/**
 * A change feed cut off in the middle of a blue/green switch — after `switch` and part of the merge, before the
 * `commit` that ends it — resumes from the last id it received while the new generation goes on changing. (The CDC
 * chaos run's feed subscriber does this: a consumer restarting, or the api-server killed as the alias moves.) The
 * local copy rebuilt from the events must equal the endpoint's records however far the merge had got.
 */
import { describe, expect, it } from 'vitest';
import { del, range, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { feedUrl, keyOf, spawnFeedApi, waitForSwitch } from './feed-switch-cut.js';
import { item } from './fixtures/data.js';
import { applyFeed, queryAll, SseConnection } from './sse.js';

describe('a change feed resumed in the middle of a switch', () => {
  it('defect: a record the new generation had when the merge was cut off, deleted before the resume, stayed in the copy', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir, { initial: range(1, 20).map((id) => item(id, 1)) });
    await using api = await spawnFeedApi(dir, writer);
    const first = await SseConnection.open(feedUrl(api.url));
    await first.waitForEvent((e) => e.event === 'live');

    // The green has records blue never had (101, 102) and lacks one blue had (20).
    const green = await writer.run({
      op: 'rebuild',
      records: [...range(1, 19).map((id) => item(id, 1)), item(101, 2), item(102, 2)],
    });
    const { switchAt } = await waitForSwitch(first);
    // The consumer went away after the merge's upsert of 101: the copy has 101, and 20 still (its delete came first
    // or not, either is a point in the merge the consumer may have reached).
    const cut = first.events.findIndex((e) => e.event === 'upsert' && keyOf(e) === 101);
    expect(cut).toBeGreaterThan(switchAt);
    const received = first.events.slice(0, cut + 1);
    const token = received.at(-1)!.id!;
    first.kill();

    // Meanwhile the green moves on: 101 is deleted, 5 changes.
    await writer.run({ op: 'commit', ops: [del(101), upsert(item(5, 3))] });

    const resumed = await SseConnection.open(feedUrl(api.url), { 'last-event-id': token });
    const { records, cache } = await queryAll(api.url, 'items');
    expect(cache).toBe(green);
    await resumed.waitForEvent((e) => e.event === 'commit');
    expect(applyFeed(resumed.events, applyFeed(received))).toEqual(records);
    resumed.kill();
  }, 120_000);
  it('cut off again in the resumed merge, it resumes from the first cut: what the new generation deleted in between goes', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir, { initial: range(1, 20).map((id) => item(id, 1)) });
    await using api = await spawnFeedApi(dir, writer);
    const first = await SseConnection.open(feedUrl(api.url));
    await first.waitForEvent((e) => e.event === 'live');
    await writer.run({
      op: 'rebuild',
      records: [...range(1, 19).map((id) => item(id, 1)), item(101, 2), item(102, 2), item(103, 2)],
    });
    await waitForSwitch(first);
    const cut = first.events.findIndex((e) => e.event === 'upsert' && keyOf(e) === 101);
    const received = first.events.slice(0, cut + 1);
    first.kill();

    await writer.run({ op: 'commit', ops: [del(101), del(102)] });
    const second = await SseConnection.open(feedUrl(api.url), { 'last-event-id': received.at(-1)!.id! });
    await second.waitForEvent((e) => e.event === 'commit');
    // Cut off again after the resumed merge's first event.
    const again = second.events.slice(0, 1);
    expect(again[0]?.event).not.toBe('commit');
    second.kill();

    await writer.run({ op: 'commit', ops: [del(103), upsert(item(5, 4))] });
    const third = await SseConnection.open(feedUrl(api.url), { 'last-event-id': again[0]!.id! });
    await third.waitForEvent((e) => e.event === 'commit');
    const { records } = await queryAll(api.url, 'items');
    expect(applyFeed(third.events, applyFeed(again, applyFeed(received)))).toEqual(records);
    expect(records.size).toBe(19);
    third.kill();
  }, 120_000);
});
