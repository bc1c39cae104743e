/**
 * A change-feed token is a position in what one subscriber was shown: the records its `filter=` and its bearer
 * token's row filter let through. Resumed under other filters — a renewed JWT whose row filter changed, a program
 * whose `filter=` changed while it kept its saved token — the changes after the position are not enough: the
 * subscriber holds records the new view hides and lacks records it shows that have not changed since. Such a
 * resume starts over (`reset {reason: "filter-changed"}`, then the snapshot of the new view); the same view resumes
 * exactly after the token, with no reset.
 */
import { signJwt } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { spawnApiServer, writeConfig } from './helpers.js';
import { applyFeed, queryAll, SseConnection, type SseEvent } from './sse.js';

const SECRET = 'feed-resume-view-secret-0123456789';

function feedUrl(base: string, filter?: Record<string, unknown>): string {
  const url = `${base}/v1/endpoints/items/changes`;
  return filter === undefined ? url : `${url}?filter=${encodeURIComponent(JSON.stringify(filter))}`;
}

const bearer = (claims: Record<string, unknown>) => ({
  authorization: `Bearer ${signJwt(SECRET, { endpoints: ['items'], ...claims })}`,
});

/** The events after the last `commit` of `sub` for an upsert of `id`, once it arrived. */
async function untilUpsertOf(sub: SseConnection, id: number, from: number): Promise<SseEvent[]> {
  await sub.waitForEvent((e) => e.event === 'upsert' && (e.data as { key: unknown[] }).key[0] === id, {
    from,
  });
  await sub.waitForEvent((e) => e.event === 'commit', { from });
  return sub.events;
}

describe('change feeds resumed under another view', () => {
  it('defect: a feed resumed with another row filter or filter= kept the old view’s records and never got the new view’s — now reset {filter-changed} and the new view’s snapshot', async () => {
    await using dir = await tempDir();
    // Records 1..50: category a (id % 3 = 0), b (id % 3 = 1), c (id % 3 = 2).
    await using writer = await startFeedWriter(dir);
    const configPath = await writeConfig(dir.path, {
      dataDir: writer.root,
      api: { auth: { jwtSecret: SECRET } },
    });
    await using api = await spawnApiServer(configPath);
    const seesA = bearer({ filters: { items: { category: 'a' } } });
    const seesB = bearer({ filters: { items: { category: 'b' } } });
    const seesAll = bearer({});

    // 1. The row filter changes when the token is renewed (the same filter= throughout: none).
    const first = await SseConnection.open(feedUrl(api.url), seesA);
    await first.waitForEvent((e) => e.event === 'live');
    first.kill();
    // A change both views can see nothing of: the resume must not rely on later changes to converge.
    await writer.run({ op: 'commit', ops: [upsert(item(2, 9))] });
    const renewed = await SseConnection.open(feedUrl(api.url), { ...seesB, 'last-event-id': first.lastId! });
    await writer.run({ op: 'commit', ops: [upsert(item(4, 9))] }); // in view b: the feed is live once it arrives
    await untilUpsertOf(renewed, 4, 0);
    const viewB = (await queryAll(api.url, 'items', {}, ['id'], seesB)).records;
    expect(viewB.size).toBe(17);
    expect(applyFeed(renewed.events, applyFeed(first.events))).toEqual(viewB);
    expect(renewed.events[0]).toEqual({ event: 'reset', data: { reason: 'filter-changed' } });
    renewed.kill();

    // 2. The program's filter= changes while it keeps its saved token (the row filter stays: none).
    const narrow = await SseConnection.open(feedUrl(api.url, { category: 'c' }), seesAll);
    await narrow.waitForEvent((e) => e.event === 'live');
    narrow.kill();
    const wide = await SseConnection.open(feedUrl(api.url, { value: { $lt: 30 } }), {
      ...seesAll,
      'last-event-id': narrow.lastId!,
    });
    await writer.run({ op: 'commit', ops: [upsert(item(1, 9))] }); // value 9: in view
    await untilUpsertOf(wide, 1, 0);
    expect(wide.events[0]).toEqual({ event: 'reset', data: { reason: 'filter-changed' } });
    expect(applyFeed(wide.events, applyFeed(narrow.events))).toEqual(
      (await queryAll(api.url, 'items', { value: { $lt: 30 } }, ['id'], seesAll)).records,
    );
    wide.kill();

    // 3. An unfiltered subscriber's token resumed with a filter: the copy holds every record, the view a third.
    const everything = await SseConnection.open(feedUrl(api.url), seesAll);
    await everything.waitForEvent((e) => e.event === 'live');
    everything.kill();
    const only = await SseConnection.open(feedUrl(api.url, { category: 'a' }), {
      ...seesAll,
      'last-event-id': everything.lastId!,
    });
    await writer.run({ op: 'commit', ops: [upsert(item(3, 9))] });
    await untilUpsertOf(only, 3, 0);
    expect(only.events[0]).toEqual({ event: 'reset', data: { reason: 'filter-changed' } });
    expect(applyFeed(only.events, applyFeed(everything.events))).toEqual(
      (await queryAll(api.url, 'items', { category: 'a' }, ['id'], seesAll)).records,
    );
    only.kill();

    // 4. The same view resumes exactly after its token, whichever event it was (upsert, commit, live): no reset.
    // The filter written with its keys in another order and the token renewed with the same claims are the same view.
    const view = { category: 'b', value: { $lt: 100 } };
    const same = await SseConnection.open(feedUrl(api.url, view), seesB);
    await same.waitForEvent((e) => e.event === 'live');
    await writer.run({ op: 'commit', ops: [upsert(item(7, 9))] });
    await untilUpsertOf(same, 7, 0);
    same.kill();
    await writer.run({ op: 'commit', ops: [upsert(item(10, 9)), upsert(item(5, 9))] });
    const again = await SseConnection.open(feedUrl(api.url, { value: { $lt: 100 }, category: 'b' }), {
      ...bearer({ filters: { items: { category: 'b' } }, sub: 'renewed' }),
      'last-event-id': same.lastId!,
    });
    await untilUpsertOf(again, 10, 0);
    expect(again.events.map((e) => [e.event, (e.data as { key?: unknown[] }).key?.[0]])).toEqual([
      ['upsert', 10],
      ['commit', undefined],
    ]);
    again.kill();
  }, 120_000);

  it('defect: a condition spelled as a bare value or as {$eq} gave two views, so resuming with the other spelling answered reset {filter-changed} and a needless snapshot', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    const configPath = await writeConfig(dir.path, {
      dataDir: writer.root,
      api: { auth: { jwtSecret: SECRET } },
    });
    await using api = await spawnApiServer(configPath);

    // filter= with a bare value, resumed with the same condition as {$eq}; the row filter the other way round.
    const first = await SseConnection.open(
      feedUrl(api.url, { category: 'b', value: { $lt: 100 } }),
      bearer({ filters: { items: { value: { $eq: 7 }, $or: [{ category: 'a' }, { category: 'b' }] } } }),
    );
    await first.waitForEvent((e) => e.event === 'live');
    first.kill();
    // Record 10 is category b (10 % 3 = 1) and in both spellings of the view; record 7's value becomes 7 × 9.
    await writer.run({ op: 'commit', ops: [upsert({ ...item(10, 9), value: 7 })] });
    const resumed = await SseConnection.open(
      feedUrl(api.url, { value: { $lt: 100 }, category: { $eq: 'b' } }),
      {
        ...bearer({
          filters: { items: { value: 7, $or: [{ category: { $eq: 'a' } }, { category: 'b' }] } },
          sub: 'renewed',
        }),
        'last-event-id': first.lastId!,
      },
    );
    // A reset's snapshot ends with `live` (the commit came before it); an exact resume with the commit.
    await resumed.waitForEvent((e) => e.event === 'commit' || e.event === 'live');
    expect(resumed.events.map((e) => [e.event, (e.data as { key?: unknown[] }).key?.[0]])).toEqual([
      ['upsert', 10],
      ['commit', undefined],
    ]);
    resumed.kill();
  }, 120_000);
});
