/**
 * A change feed cut off inside a blue/green switch's merge, resumed when what its token names has moved on: the
 * generations collected, the new one's log trimmed past the cut, a second switch made meanwhile — and tokens of a
 * merge tampered with. Each ends with the subscriber's copy equal to the endpoint's records (through `reset` and a
 * whole snapshot where the cut cannot be continued), or with a 400 before the stream starts; never a 500, never a
 * stream that leaves the copy wrong.
 */
import { describe, expect, it } from 'vitest';
import { collect, del, type FeedWriter, range, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import {
  cutsInMerge,
  feedUrl,
  keyOf,
  type SwitchSeen,
  spawnFeedApi,
  waitForSwitch,
} from './feed-switch-cut.js';
import { item } from './fixtures/data.js';
import type { SpawnedApiServer } from './helpers.js';
import { applyFeed, queryAll, SseConnection, type SseEvent } from './sse.js';

/** Blue: 1..20. Green: 1..19 as they were, and 101..103 blue never had (20 is gone). */
const BLUE = range(1, 20).map((id) => item(id, 1));
const GREEN = [...range(1, 19).map((id) => item(id, 1)), item(101, 2), item(102, 2), item(103, 2)];

/** A subscriber that followed blue, then was cut off inside the merge into green (after its first event). */
interface CutInMerge {
  blue: string;
  green: string;
  seen: SwitchSeen;
  /** The events it received up to the `commit` ending the merge (cut points are within them). */
  received: SseEvent[];
  /** The token every event of the merge carries. */
  token: string;
}

async function cutInMerge(api: SpawnedApiServer, writer: FeedWriter): Promise<CutInMerge> {
  const first = await SseConnection.open(feedUrl(api.url));
  const live = await first.waitForEvent((e) => e.event === 'live');
  const green = await writer.run({ op: 'rebuild', records: GREEN });
  const seen = await waitForSwitch(first);
  first.kill();
  expect(seen.merge.length).toBeGreaterThan(1);
  return {
    blue: (live.data as { generation: string }).generation,
    green,
    seen,
    received: first.events.slice(0, seen.commitAt + 1),
    token: seen.merge[0]!.id!,
  };
}

/** What a subscriber does with the resumed events, from every point of the merge it may have been cut off at. */
function copiesAfter(cut: CutInMerge, resumed: SseEvent[]): Map<string, unknown>[] {
  return cutsInMerge(cut.received, cut.seen).map((prefix) => applyFeed(resumed, applyFeed(prefix)));
}

/** The events from a `reset` to `live`: a snapshot, whole (every record once) and nothing else. */
function expectWholeSnapshot(events: SseEvent[], reason: string, records: Map<string, unknown>): void {
  expect(events[0]).toEqual({ event: 'reset', data: { reason } });
  const liveAt = events.findIndex((e) => e.event === 'live');
  const snapshot = events.slice(1, liveAt);
  expect(snapshot.every((e) => e.event === 'upsert')).toBe(true);
  expect(snapshot).toHaveLength(records.size);
  expect(applyFeed(snapshot)).toEqual(records);
}

/** A `c1.` token with these fields, as a client tampering with one would write it. */
const tokenOf = (fields: unknown[]) => `c1.${Buffer.from(JSON.stringify(fields)).toString('base64url')}`;
const fieldsOf = (token: string) => JSON.parse(Buffer.from(token.slice(3), 'base64url').toString('utf8'));

describe('a change feed resumed in the middle of a switch, when what its token names has moved on', () => {
  it('both generations retired and collected: reset {generation-gone}, then a whole snapshot of the serving one', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir, { initial: BLUE });
    await using api = await spawnFeedApi(dir, writer);
    const cut = await cutInMerge(api, writer);

    // Blue collected while green serves: the merge's `from` is gone.
    await collect(writer, cut.blue);
    const onGreen = await SseConnection.open(feedUrl(api.url), { 'last-event-id': cut.token });
    await onGreen.waitForEvent((e) => e.event === 'live');
    const green = await queryAll(api.url, 'items');
    expect(green.cache).toBe(cut.green);
    expectWholeSnapshot(onGreen.events, 'generation-gone', green.records);
    for (const copy of copiesAfter(cut, onGreen.events)) expect(copy).toEqual(green.records);
    onGreen.kill();

    // A newer generation, and green collected too: both sides of the merge are gone.
    const newer = await writer.run({ op: 'rebuild', records: range(10, 40).map((id) => item(id, 3)) });
    await collect(writer, cut.green);
    const onNewer = await SseConnection.open(feedUrl(api.url, { after: cut.token }));
    await onNewer.waitForEvent((e) => e.event === 'live');
    const latest = await queryAll(api.url, 'items');
    expect(latest.cache).toBe(newer);
    expectWholeSnapshot(onNewer.events, 'generation-gone', latest.records);
    for (const copy of copiesAfter(cut, onNewer.events)) expect(copy).toEqual(latest.records);
    // And it goes on live.
    await writer.run({ op: 'commit', ops: [del(11), upsert(item(99, 4))] });
    await onNewer.waitForEvent((e) => e.event === 'commit');
    for (const copy of copiesAfter(cut, onNewer.events))
      expect(copy).toEqual((await queryAll(api.url, 'items')).records);
    onNewer.kill();
  }, 120_000);

  it("the new generation's log trimmed past the cut: reset {retention}, then a whole snapshot", async () => {
    await using dir = await tempDir();
    // Five entries kept: a few commits after the switch trim the green's log past where the merge showed it.
    await using writer = await startFeedWriter(dir, { initial: BLUE, retainRecords: 5 });
    await using api = await spawnFeedApi(dir, writer);
    const cut = await cutInMerge(api, writer);
    for (const id of [1, 2, 3]) await writer.run({ op: 'commit', ops: [upsert(item(id, 3)), del(100 + id)] });

    const resumed = await SseConnection.open(feedUrl(api.url), { 'last-event-id': cut.token });
    await resumed.waitForEvent((e) => e.event === 'live');
    const { records, cache } = await queryAll(api.url, 'items');
    expect(cache).toBe(cut.green);
    expectWholeSnapshot(resumed.events, 'retention', records);
    for (const copy of copiesAfter(cut, resumed.events)) expect(copy).toEqual(records);
    resumed.kill();
  }, 120_000);

  it('a second switch while it was away (blue → green → newer): it finishes the merge into green, then switches to newer', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir, { initial: BLUE });
    await using api = await spawnFeedApi(dir, writer);
    const cut = await cutInMerge(api, writer);
    // Green moves on after the cut, then is replaced: newer drops 1..4 and 103, keeps 101 (deleted on green) and
    // changes the rest.
    await writer.run({ op: 'commit', ops: [del(101), del(102), upsert(item(5, 3)), upsert(item(104, 3))] });
    const newer = await writer.run({
      op: 'rebuild',
      records: [...range(5, 25).map((id) => item(id, 4)), item(101, 4), item(102, 4)],
    });
    await writer.run({ op: 'commit', ops: [del(24), upsert(item(6, 5))] });

    const resumed = await SseConnection.open(feedUrl(api.url), { 'last-event-id': cut.token });
    const second = await waitForSwitch(resumed);
    expect(resumed.events[second.switchAt]!.data).toEqual({ from: cut.green, to: newer });
    // Before the second switch: the rest of the first merge, ending with its commit.
    const firstCommit = resumed.events.findIndex((e) => e.event === 'commit');
    expect(firstCommit).toBeLessThan(second.switchAt);
    expect(resumed.events.some((e) => e.event === 'reset')).toBe(false);
    const { records, cache } = await queryAll(api.url, 'items');
    expect(cache).toBe(newer);
    for (const copy of copiesAfter(cut, resumed.events.slice(0, second.commitAt + 1)))
      expect(copy).toEqual(records);
    resumed.kill();
  }, 120_000);
});

describe('a tampered merge token', () => {
  it('400 at the token’s path when it could never have been issued; reset and a whole snapshot when its position is not there', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir, { initial: BLUE });
    await using api = await spawnFeedApi(dir, writer);
    const cut = await cutInMerge(api, writer);
    const [endpoint, blue, blueSeq, green, greenSeq] = fieldsOf(cut.token) as [
      string,
      string,
      number,
      string,
      number,
    ];
    expect([endpoint, blue, green]).toEqual(['items', cut.blue, cut.green]);
    const { records } = await queryAll(api.url, 'items');

    /** The status and problem of a subscription, or its events up to `live` (or the end of the stream). */
    const answerTo = async (token: string, where: 'querystring.after' | 'headers.last-event-id') => {
      try {
        const opened =
          where === 'querystring.after'
            ? await SseConnection.open(feedUrl(api.url, { after: token }))
            : await SseConnection.open(feedUrl(api.url), { 'last-event-id': token });
        await opened.waitForEvent((e) => e.event === 'live' || e.event === 'commit');
        opened.kill();
        return { status: 200, events: opened.events };
      } catch (err) {
        const { status, body } = err as { status: number; body: string };
        if (status === undefined) throw err;
        return { status, problem: JSON.parse(body) };
      }
    };
    const otherEndpoints = `orders-${green.slice(-26)}`;
    const refused: Array<[unknown[], string]> = [
      [[endpoint, blue, blueSeq, otherEndpoints, greenSeq], "another endpoint's generation"],
      [[endpoint, blue, blueSeq, 'items', greenSeq], 'the alias, not a generation'],
      [[endpoint, blue, blueSeq, `../${green}`, greenSeq], 'a path'],
      [[endpoint, blue, blueSeq, green, -1], 'a negative sequence'],
      [[endpoint, blue, blueSeq, green, 1.5], 'a fractional sequence'],
      [[endpoint, blue, blueSeq, green, String(greenSeq)], 'a sequence as text'],
      [[endpoint, blue, blueSeq, green, Number.MAX_SAFE_INTEGER + 2], 'an unsafe integer'],
      [[endpoint, blue, blueSeq, green], 'a merge without its sequence'],
      [[endpoint, blue, blueSeq, green, greenSeq, 1], 'a sixth field'],
      [[endpoint, blue, blueSeq, null, greenSeq], 'no generation'],
    ];
    for (const [fields, why] of refused)
      for (const where of ['querystring.after', 'headers.last-event-id'] as const)
        expect(await answerTo(tokenOf(fields), where), `${why} (${where})`).toMatchObject({
          status: 400,
          problem: { code: 'VALIDATION_FAILED', errors: [{ path: where }] },
        });

    // Well-formed, but its position is not there: a real token's position can only be gone, so `reset` and the
    // snapshot (as for a token of one generation), never a merge from a position that was never shown.
    const reset: Array<[unknown[], string]> = [
      [[endpoint, blue, blueSeq, green, greenSeq + 1_000], 'unknown-position'],
      [[endpoint, blue, blueSeq + 1_000, green, greenSeq], 'unknown-position'],
      [[endpoint, blue, blueSeq, 'items-00000000000000000000000000', greenSeq], 'generation-gone'],
    ];
    for (const [fields, reason] of reset)
      for (const where of ['querystring.after', 'headers.last-event-id'] as const) {
        const answer = await answerTo(tokenOf(fields), where);
        expect(answer.status, `${JSON.stringify(fields)} (${where})`).toBe(200);
        expectWholeSnapshot(answer.events!, reason, records);
      }

    // The api-server is still well: the untampered token resumes the merge.
    const resumed = await SseConnection.open(feedUrl(api.url), { 'last-event-id': cut.token });
    await resumed.waitForEvent((e) => e.event === 'commit');
    for (const copy of copiesAfter(cut, resumed.events)) expect(copy).toEqual(records);
    expect(resumed.events.map(keyOf).filter((k) => k !== undefined).length).toBeGreaterThan(0);
    resumed.kill();
  }, 120_000);

  it('defect: a merge token naming one generation on both sides (never issued) opened a stream instead of a 400', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir, { initial: BLUE });
    await using api = await spawnFeedApi(dir, writer);
    const cut = await cutInMerge(api, writer);
    const [endpoint, blue, blueSeq, green, greenSeq] = fieldsOf(cut.token) as [
      string,
      string,
      number,
      string,
      number,
    ];
    for (const fields of [
      [endpoint, blue, blueSeq, blue, blueSeq],
      [endpoint, green, greenSeq, green, greenSeq],
    ])
      for (const where of ['querystring.after', 'headers.last-event-id'] as const) {
        const token = tokenOf(fields);
        const answer = await (where === 'querystring.after'
          ? SseConnection.open(feedUrl(api.url, { after: token }))
          : SseConnection.open(feedUrl(api.url), { 'last-event-id': token })
        ).then(
          (opened) => {
            opened.kill();
            return { status: 200 };
          },
          (err: { status: number; body: string }) => ({ status: err.status, problem: JSON.parse(err.body) }),
        );
        // Before: 200 and a stream (a merge of the generation into itself, then on from there).
        expect(answer, `${fields[1]} into itself (${where})`).toMatchObject({
          status: 400,
          problem: {
            code: 'VALIDATION_FAILED',
            errors: [{ path: where, message: expect.stringContaining('into itself') }],
          },
        });
      }
  }, 120_000);
});
