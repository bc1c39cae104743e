/**
 * A filtered change feed — a token's row filter, or `filter=` — cut off inside a blue/green switch's merge and
 * resumed after the new generation changed: the subscriber's copy ends equal to the new generation's records that
 * the filter shows, from whichever event of the merge it was cut off at, and no event ever names a key the filter
 * hid all along (no upsert of a hidden record, no delete of a key the subscriber could not have held: that would
 * tell it the key exists).
 */
import { signJwt } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { del, range, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { cutsInMerge, feedUrl, keyOf, spawnFeedApi, waitForSwitch } from './feed-switch-cut.js';
import { item } from './fixtures/data.js';
import { applyFeed, queryAll, SseConnection } from './sse.js';

const SECRET = 'switch-resume-filtered-secret-0123456789';
/** The view both feeds have: category b (ids with id % 3 = 1, unless a record says otherwise). */
const VIEW = { category: 'b' };

const as = (record: Record<string, unknown>, category: string) => ({ ...record, category });

/** Blue: 1..30 as `item` makes them. */
const BLUE = range(1, 30).map((id) => item(id, 1));
/** Green, against blue: what the merge must do for a subscriber of VIEW, record by record. */
const GREEN = [
  ...range(1, 30)
    .filter((id) => ![2, 3, 4, 5, 7, 10].includes(id))
    .map((id) => item(id, 1)),
  item(4, 2), // in view on both sides, changed: upsert
  as(item(7, 2), 'a'), // leaves the view: delete
  as(item(2, 2), 'b'), // enters the view: upsert
  item(3, 2), // hidden on both sides, changed: nothing
  // 5 (hidden) is gone: nothing; 10 (in view) is gone: delete
  item(100, 2), // new, in view: upsert
  item(103, 2), // new, in view: upsert
  item(201, 2), // new, hidden (a): nothing
  item(203, 2), // new, hidden (c): nothing
];
/** What the green commits while the subscriber is away. */
const AFTER_CUT = [
  upsert(as(item(13, 3), 'a')), // in view on both sides at the cut, leaves it: delete
  del(16), // in view, deleted: delete
  upsert(item(6, 3)), // hidden, changed: nothing
  del(9), // hidden, deleted: nothing
  upsert(item(300, 3)), // new, hidden: nothing
  upsert(as(item(12, 3), 'b')), // hidden until now, enters the view: upsert
  del(100), // new in the green (in view), deleted since: delete
  del(7), // in view on blue, hidden on green, now deleted: delete (the copy may still hold blue's)
  del(3), // hidden on both sides at the cut, deleted: nothing
  upsert(item(203, 3)), // hidden, changed: nothing
  upsert(as(item(2, 3), 'c')), // entered the view in the merge, leaves it: delete
];
/** Every key whose record was in the view at some time, on some side; any other key must never be named. */
const EVER_IN_VIEW = new Set([1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 2, 100, 103, 12]);
const HIDDEN = [...range(1, 30), 100, 103, 201, 203, 300].filter((id) => !EVER_IN_VIEW.has(id));
/** The green's records in the view at the end. */
const FINAL_IN_VIEW = [1, 4, 12, 19, 22, 25, 28, 103];

const rowFiltered = signJwt(SECRET, { endpoints: ['items'], filters: { items: VIEW } });
const unfiltered = signJwt(SECRET, { endpoints: ['items'] });

const FEEDS = [
  {
    view: "a token's row filter, resumed by Last-Event-ID",
    token: rowFiltered,
    params: {} as Record<string, string>,
    query: {},
    resume: (token: string) => ({ params: {}, headers: { 'last-event-id': token } }),
  },
  {
    view: 'filter=, resumed by after=',
    token: unfiltered,
    params: { filter: JSON.stringify(VIEW) },
    query: VIEW,
    resume: (token: string) => ({ params: { after: token }, headers: {} }),
  },
];

describe('a filtered change feed resumed in the middle of a switch', () => {
  for (const feed of FEEDS)
    it(`${feed.view}: the copy ends as the new generation's records in the view, from any cut, and no hidden key is named`, async () => {
      await using dir = await tempDir();
      await using writer = await startFeedWriter(dir, { initial: BLUE });
      await using api = await spawnFeedApi(dir, writer, { api: { auth: { jwtSecret: SECRET } } });
      const auth = { authorization: `Bearer ${feed.token}` };
      const first = await SseConnection.open(feedUrl(api.url, feed.params), auth);
      await first.waitForEvent((e) => e.event === 'live');

      await writer.run({ op: 'rebuild', records: GREEN });
      const seen = await waitForSwitch(first);
      // 2, 4 and 100, 103 upserted, 7 and 10 deleted: the merge as this view sees it, in primary-key order.
      expect(seen.merge.map((e) => [e.event, keyOf(e)])).toEqual([
        ['upsert', 2],
        ['upsert', 4],
        ['delete', 7],
        ['delete', 10],
        ['upsert', 100],
        ['upsert', 103],
      ]);
      // One token for the whole merge: a resume from any of its events is the same request.
      const token = seen.merge[0]!.id!;
      expect(new Set(seen.merge.map((e) => e.id))).toEqual(new Set([token]));
      const received = first.events.slice(0, seen.commitAt + 1);
      first.kill();

      await writer.run({ op: 'commit', ops: AFTER_CUT });
      const resume = feed.resume(token);
      const resumed = await SseConnection.open(feedUrl(api.url, { ...feed.params, ...resume.params }), {
        ...auth,
        ...resume.headers,
      });
      await resumed.waitForEvent((e) => e.event === 'commit');
      // Every key the subscriber may hold differently from the green now, and nothing else: the merged keys in
      // primary-key order, then 100 (on neither side now), then the commit.
      expect(resumed.events.map((e) => [e.event, keyOf(e)])).toEqual([
        ['delete', 2],
        ['upsert', 4],
        ['delete', 7],
        ['delete', 10],
        ['upsert', 12],
        ['delete', 13],
        ['delete', 16],
        ['upsert', 103],
        ['delete', 100],
        ['commit', undefined],
      ]);

      const { records } = await queryAll(api.url, 'items', feed.query, ['id'], auth);
      expect([...records.keys()].map((k) => JSON.parse(k)[0]).sort((a, b) => a - b)).toEqual(FINAL_IN_VIEW);
      for (const cut of cutsInMerge(received, seen))
        expect({ cutAfter: cut.length, copy: applyFeed(resumed.events, applyFeed(cut)) }).toEqual({
          cutAfter: cut.length,
          copy: records,
        });
      const named = [...received, ...resumed.events].filter(
        (e) => e.event === 'upsert' || e.event === 'delete',
      );
      expect(named.filter((e) => HIDDEN.includes(keyOf(e) as number))).toEqual([]);
      expect(
        named.filter(
          (e) => e.event === 'upsert' && (e.data as { record: { category: string } }).record.category !== 'b',
        ),
      ).toEqual([]);
      resumed.kill();
    }, 120_000);
});
