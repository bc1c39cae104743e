import { signJwt, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { del, range, startFeedApi, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { applyFeed, queryAll, SseConnection, type SseEvent } from './sse.js';

const feedUrl = (base: string, params: Record<string, string> = {}) =>
  `${base}/v1/endpoints/items/changes${Object.keys(params).length ? `?${new URLSearchParams(params)}` : ''}`;

const SECRET = 'change-feed-test-secret-0123456789';

const dataEvents = (events: SseEvent[]) =>
  events.filter((e) => e.event === 'upsert' || e.event === 'delete' || e.event === 'commit');

describe('change feeds (GET /v1/endpoints/:name/changes)', () => {
  it('starts with a snapshot then live; a killed connection resumes by token with exactly the missed events', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root);

    const a = await SseConnection.open(feedUrl(api.url));
    const reference = await SseConnection.open(feedUrl(api.url));
    await a.waitForEvent((e) => e.event === 'live');
    await reference.waitForEvent((e) => e.event === 'live');
    const snapshot = a.events.filter((e) => e.event === 'upsert');
    expect(snapshot).toHaveLength(50);
    expect(a.events.findIndex((e) => e.event === 'live')).toBe(50);

    await writer.run({ op: 'commit', ops: [upsert(item(1, 2)), upsert(item(60, 2)), del(2)] });
    await a.waitForEvent((e) => e.event === 'commit');
    const token = a.lastId!;
    a.kill();
    // Missed while disconnected: three transactions.
    await writer.run({ op: 'commit', ops: [upsert(item(3, 3)), del(4)] });
    await writer.run({ op: 'commit', ops: [upsert(item(61, 3))] });
    await writer.run({ op: 'commit', ops: [del(60), upsert(item(5, 4))] });
    await reference.waitForEvent((e) => e.event === 'commit', { count: 4 });

    const resumed = await SseConnection.open(feedUrl(api.url), { 'last-event-id': token });
    await resumed.waitForEvent((e) => e.event === 'commit', { count: 3 });
    // No gap, no duplicate: the resumed stream is the reference's stream after the token, event for event.
    const refAfter = dataEvents(reference.events).slice(
      dataEvents(reference.events).findIndex((e) => e.id === token) + 1,
    );
    expect(dataEvents(resumed.events)).toEqual(refAfter);
    expect(resumed.events.some((e) => e.event === 'live' || e.event === 'reset')).toBe(false);
    expect(dataEvents(resumed.events).map((e) => e.event)).toEqual([
      'upsert',
      'delete',
      'commit',
      'upsert',
      'commit',
      'delete',
      'upsert',
      'commit',
    ]);
    expect(resumed.events.find((e) => e.event === 'commit')?.data).toMatchObject({ position: { source: 3 } });

    // Snapshot + everything before the kill + the resumed events = the endpoint now.
    const local = applyFeed(a.events);
    applyFeed(resumed.events, local);
    const { records } = await queryAll(api.url, 'items');
    expect(local).toEqual(records);
    expect(applyFeed(reference.events)).toEqual(records);
    resumed.kill();
    reference.kill();
  });

  it('across a blue/green rebuild: switch, then the merge turns the old generation into the new one', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root);
    const sub = await SseConnection.open(feedUrl(api.url));
    await sub.waitForEvent((e) => e.event === 'live');
    await writer.run({ op: 'commit', ops: [upsert(item(7, 5))] });
    await sub.waitForEvent((e) => e.event === 'commit');
    const beforeSwitch = sub.lastId!;
    const live = await sub.waitForEvent((e) => e.event === 'live');
    const blue = (live.data as { generation: string }).generation;

    // Green: 1..40 kept (10..19 changed), 41..50 removed, 51..55 added.
    const green = [
      ...range(1, 9).map((id) => item(id, 1)),
      ...range(10, 19).map((id) => item(id, 2)),
      ...range(20, 40).map((id) => item(id, 1)),
      ...range(51, 55).map((id) => item(id, 2)),
    ];
    const greenName = await writer.run({ op: 'rebuild', records: green });
    const switched = await sub.waitForEvent((e) => e.event === 'switch');
    expect(switched.data).toEqual({ from: blue, to: greenName });
    await sub.waitForEvent((e) => e.event === 'commit', { from: sub.events.indexOf(switched) });
    const merge = sub.events.slice(
      sub.events.indexOf(switched) + 1,
      sub.events.findIndex((e, i) => i > sub.events.indexOf(switched) && e.event === 'commit'),
    );
    // Only the differences: 10 changed + 5 added upserts (item 7 went back to gen 1), 10 deletes.
    expect(merge.filter((e) => e.event === 'upsert')).toHaveLength(16);
    expect(merge.filter((e) => e.event === 'delete')).toHaveLength(10);
    const { records, cache } = await queryAll(api.url, 'items');
    expect(cache).toBe(greenName);
    expect(applyFeed(sub.events)).toEqual(records);

    // Then the new generation's changes.
    await writer.run({ op: 'commit', ops: [upsert(item(100, 9)), del(1)] });
    await sub.waitForEvent((e) => e.event === 'commit', { from: sub.events.indexOf(switched), count: 2 });
    expect(applyFeed(sub.events)).toEqual((await queryAll(api.url, 'items')).records);

    // A subscriber resuming with a token of the old generation (still there) gets the switch and the merge too.
    const late = await SseConnection.open(feedUrl(api.url, { after: beforeSwitch }));
    // The merge reaches green's latest commit at once: one commit event, at green's position.
    await late.waitForEvent((e) => e.event === 'commit');
    expect(late.events[0]).toMatchObject({ event: 'switch', data: { from: blue, to: greenName } });
    const local = applyFeed(sub.events.slice(0, sub.events.findIndex((e) => e.id === beforeSwitch) + 1));
    expect(applyFeed(late.events, local)).toEqual((await queryAll(api.url, 'items')).records);
    sub.kill();
    late.kill();
  });

  it('across a switch that changes the primary key: every old key is deleted, the subscriber holds exactly the new generation', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root);
    const sub = await SseConnection.open(feedUrl(api.url));
    const live = await sub.waitForEvent((e) => e.event === 'live');
    const blue = (live.data as { generation: string }).generation;
    expect([...applyFeed(sub.events).keys()]).toContain('[1]');

    // Green keys records by [category, id]: same ids 1..30 (some changed), 31..50 gone, 60..62 new.
    const green = [
      ...range(1, 20).map((id) => item(id, 1)),
      ...range(21, 30).map((id) => item(id, 2)),
      ...range(60, 62).map((id) => item(id, 3)),
    ];
    const greenName = await writer.run({ op: 'rebuild', records: green, primaryKey: ['category', 'id'] });
    const switched = await sub.waitForEvent((e) => e.event === 'switch');
    expect(switched.data).toEqual({ from: blue, to: greenName });
    await sub.waitForEvent((e) => e.event === 'commit', { from: sub.events.indexOf(switched) });

    const { records, cache } = await queryAll(api.url, 'items', {}, ['category', 'id']);
    expect(cache).toBe(greenName);
    expect(records.size).toBe(33);
    const local = applyFeed(sub.events);
    // No record survives under its old key ([id]); each is there once, under [category, id].
    expect([...local.keys()].filter((key) => JSON.parse(key).length === 1)).toEqual([]);
    expect(local).toEqual(records);

    // The new generation's changes use the new key.
    await writer.run({
      op: 'commit',
      ops: [upsert(item(70, 4)), { op: 'delete', key: [item(1, 1).category, 1] }],
    });
    await sub.waitForEvent((e) => e.event === 'commit', { from: sub.events.indexOf(switched), count: 2 });
    expect(applyFeed(sub.events)).toEqual((await queryAll(api.url, 'items', {}, ['category', 'id'])).records);
    sub.kill();
  });

  it('a token older than retention gets reset {reason} and a snapshot; a forged or foreign token is 400', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir, { retainRecords: 10 });
    await using api = await startFeedApi(writer.root);
    const sub = await SseConnection.open(feedUrl(api.url));
    await sub.waitForEvent((e) => e.event === 'live');
    await writer.run({ op: 'commit', ops: [upsert(item(1, 2))] });
    await sub.waitForEvent((e) => e.event === 'commit');
    const token = sub.lastId!;
    sub.kill();
    for (let i = 0; i < 6; i += 1)
      await writer.run({ op: 'commit', ops: [upsert(item(10 + i, 3)), del(20 + i)] });

    const again = await SseConnection.open(feedUrl(api.url, { after: token }));
    await again.waitForEvent((e) => e.event === 'live');
    expect(again.events[0]).toEqual({ event: 'reset', data: { reason: 'retention' } });
    const { records } = await queryAll(api.url, 'items');
    expect(again.events.filter((e) => e.event === 'upsert')).toHaveLength(records.size);
    expect(applyFeed(again.events, applyFeed(sub.events))).toEqual(records);
    again.kill();

    const forged = await SseConnection.open(feedUrl(api.url, { after: 'nonsense' })).catch((e) => e);
    expect(forged.status).toBe(400);
    expect(JSON.parse(forged.body)).toMatchObject({ code: 'VALIDATION_FAILED' });
    const foreign = `c1.${Buffer.from(JSON.stringify(['orders', 'x', 1])).toString('base64url')}`;
    const other = await SseConnection.open(feedUrl(api.url, { after: foreign })).catch((e) => e);
    expect(other.status).toBe(400);
    const unknown = await SseConnection.open(`${api.url}/v1/endpoints/nope/changes`).catch((e) => e);
    expect(unknown.status).toBe(404);
    const badFilter = await SseConnection.open(feedUrl(api.url, { filter: '{"value": {"$gt": ' })).catch(
      (e) => e,
    );
    expect(JSON.parse(badFilter.body)).toMatchObject({ code: 'MALFORMED_JSON' });
    // defect: a filter naming an unknown field, or comparing a field with a value of another type, opened a feed
    // that never sent a record (a query answers both with 400).
    for (const [filter, path, reason] of [
      [{ nope: 1 }, 'querystring.filter.nope', 'unknown field'],
      [{ value: 'x' }, 'querystring.filter.value', 'number'],
    ] as const) {
      const refused = await SseConnection.open(feedUrl(api.url, { filter: JSON.stringify(filter) })).catch(
        (e) => e,
      );
      expect(refused.status).toBe(400);
      const problem = JSON.parse(refused.body);
      expect(problem).toMatchObject({ code: 'INVALID_QUERY' });
      expect(problem.errors).toEqual([{ path, message: expect.stringContaining(reason) }]);
    }

    // A token of a generation that no longer exists: reset + snapshot.
    const gone = `c1.${Buffer.from(JSON.stringify(['items', 'items-00000000000000000000000000', 3])).toString('base64url')}`;
    const fresh = await SseConnection.open(feedUrl(api.url, { after: gone }));
    await fresh.waitForEvent((e) => e.event === 'live');
    expect(fresh.events[0]).toEqual({ event: 'reset', data: { reason: 'generation-gone' } });
    fresh.kill();
  });

  it('defect: a token whose generation is no generation name of the endpoint got reset and a snapshot — now 400 before the stream starts', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root);
    const token = (generation: string) =>
      `c1.${Buffer.from(JSON.stringify(['items', generation, 1])).toString('base64url')}`;
    /** The status and problem of a subscription, or the first event of a stream that opened (then closed). */
    const answerTo = async (headers: Record<string, string>, params: Record<string, string> = {}) => {
      try {
        const opened = await SseConnection.open(feedUrl(api.url, params), headers);
        await opened.waitForEvent(() => true);
        opened.kill();
        return { status: 200, first: opened.events[0] };
      } catch (err) {
        const { status, body } = err as { status: number; body: string };
        return { status, problem: JSON.parse(body) };
      }
    };
    for (const [generation, why] of [
      ['x', 'no generation name'],
      ['items', 'the alias, not a generation'],
      ['orders-01jf3q0v9s6k2m8c4r1x7b5n2d', "another endpoint's generation"],
      ['items-01JF3Q0V9S6K2M8C4R1X7B5N2D', 'an id out of the alphabet names are made of'],
      ['../../items-01jf3q0v9s6k2m8c4r1x7b5n2d', 'a path'],
    ] as const) {
      for (const [where, request] of [
        ['querystring.after', () => answerTo({}, { after: token(generation) })],
        ['headers.last-event-id', () => answerTo({ 'last-event-id': token(generation) })],
      ] as const) {
        const answer = await request();
        expect(answer, `${why} (${where})`).toMatchObject({
          status: 400,
          problem: {
            code: 'VALIDATION_FAILED',
            errors: [{ path: where, message: expect.stringContaining('generation') }],
          },
        });
      }
    }
    // A well-formed generation name this host does not have (collected, or never here) is a real token gone: reset.
    const gone = await answerTo({}, { after: token('items-00000000000000000000000000') });
    expect(gone).toEqual({ status: 200, first: { event: 'reset', data: { reason: 'generation-gone' } } });
  });

  it('filter= applies: a record leaving the filter is a delete; the local copy equals the filtered query', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root);
    const filter = { category: 'a' };
    const sub = await SseConnection.open(feedUrl(api.url, { filter: JSON.stringify(filter) }));
    await sub.waitForEvent((e) => e.event === 'live');
    const expected = (await queryAll(api.url, 'items', filter)).records;
    expect(applyFeed(sub.events)).toEqual(expected);
    expect(
      sub.events
        .filter((e) => e.event === 'upsert')
        .every((e) => (e.data as { record: { category: string } }).record.category === 'a'),
    ).toBe(true);

    // id 3 is in category a (3 % 3 = 0): moving it to b must delete it for this subscriber.
    await writer.run({
      op: 'commit',
      ops: [
        upsert({ ...item(3, 2), category: 'b' }),
        upsert({ ...item(4, 2), category: 'a' }),
        upsert(item(5, 2)),
      ],
    });
    await sub.waitForEvent((e) => e.event === 'commit');
    const live = sub.events.slice(sub.events.findIndex((e) => e.event === 'live') + 1);
    // id 5 (category c) was never in view: no event.
    expect(live.map((e) => [e.event, (e.data as { key?: unknown[] }).key?.[0]])).toEqual([
      ['delete', 3],
      ['upsert', 4],
      ['commit', undefined],
    ]);
    expect(applyFeed(sub.events)).toEqual((await queryAll(api.url, 'items', filter)).records);

    // The merge at a switch is filtered too.
    await writer.run({ op: 'rebuild', records: range(1, 30).map((id) => item(id, 3)) });
    await sub.waitForEvent((e) => e.event === 'switch');
    await sub.waitForEvent((e) => e.event === 'commit', { count: 2 });
    expect(applyFeed(sub.events)).toEqual((await queryAll(api.url, 'items', filter)).records);
    sub.kill();
  });

  it("the token's row filter applies to the feed (ANDed with filter=); no token 401, another endpoint 403", async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root, { api: { auth: { jwtSecret: SECRET } } });
    const token = signJwt(SECRET, { endpoints: ['items'], filters: { items: { category: 'b' } } });
    const auth = { authorization: `Bearer ${token}` };
    const sub = await SseConnection.open(
      feedUrl(api.url, { filter: JSON.stringify({ value: { $lt: 30 } }) }),
      auth,
    );
    await sub.waitForEvent((e) => e.event === 'live');
    const snapshot = sub.events
      .filter((e) => e.event === 'upsert')
      .map((e) => (e.data as { key: number[] }).key[0]);
    // category b: id % 3 = 1; value = id (gen 1) < 30.
    expect(snapshot).toEqual(range(1, 29).filter((id) => id % 3 === 1));
    // (item(31, 2): a change of record 31 — re-sending it as stored would be no event at all.)
    await writer.run({ op: 'commit', ops: [upsert({ ...item(1, 1), category: 'a' }), upsert(item(31, 2))] });
    await sub.waitForEvent((e) => e.event === 'commit');
    const live = sub.events.slice(sub.events.findIndex((e) => e.event === 'live') + 1);
    // id 1 left the token's view (category a) → delete; id 31 is b but its value ≥ 30, before and after: no
    // event (it never was in view; its key is not this token's to learn — feed-hidden-keys.test.ts).
    expect(live.map((e) => [e.event, (e.data as { key?: unknown[] }).key?.[0]])).toEqual([
      ['delete', 1],
      ['commit', undefined],
    ]);
    sub.kill();

    const none = await SseConnection.open(feedUrl(api.url)).catch((e) => e);
    expect(none.status).toBe(401);
    const other = signJwt(SECRET, { endpoints: ['orders'] });
    const forbidden = await SseConnection.open(feedUrl(api.url), { authorization: `Bearer ${other}` }).catch(
      (e) => e,
    );
    expect(forbidden.status).toBe(403);
    // defect: a token whose row filter names a field the endpoint lacks opened a feed that never sent a record.
    const unfit = signJwt(SECRET, { endpoints: ['items'], filters: { items: { nofield: 1 } } });
    const refused = await SseConnection.open(feedUrl(api.url), { authorization: `Bearer ${unfit}` }).catch(
      (e) => e,
    );
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.body)).toMatchObject({ code: 'FORBIDDEN' });
  });

  it('refuses subscribers past api.changes.maxSubscribers with 429 QUEUE_FULL', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root, { api: { changes: { maxSubscribers: 2 } } });
    const open = [await SseConnection.open(feedUrl(api.url)), await SseConnection.open(feedUrl(api.url))];
    const third = await SseConnection.open(feedUrl(api.url)).catch((e) => e);
    expect(third.status).toBe(429);
    expect(JSON.parse(third.body)).toMatchObject({ code: 'QUEUE_FULL' });
    // defect: the 429 said when to retry only in its body; clients (and proxies) read the header.
    expect(third.headers['retry-after']).toBe('5');
    open[0]!.kill();
    const again = await waitFor(() => SseConnection.open(feedUrl(api.url)).catch(() => null), {
      what: 'a free subscriber slot',
    });
    await again.waitForEvent((e) => e.event === 'live');
    again.kill();
    open[1]!.kill();
  });
});
