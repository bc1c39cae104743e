/**
 * A feed's filters (`filter=` and the token's row filter) are checked against the endpoint's fields when it
 * connects: a filter that does not fit is refused (400 / 403), never a feed that quietly shows nothing. The same
 * holds when the endpoint switches to a generation of another schema while the feed is open.
 */
import { signJwt, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { range, startFeedApi, startFeedWriter, tempDir } from './feed-harness.js';
import { SseConnection, type SseEvent } from './sse.js';

const SECRET = 'filter-switch-test-secret-0123456789';

/** The events after `live`. */
const afterLive = (events: SseEvent[]) => events.slice(events.findIndex((e) => e.event === 'live') + 1);

describe('change feeds across a schema change', () => {
  it('defect: a feed whose filter no longer fits the new generation deleted every record and went on as a feed of nothing', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root, { api: { auth: { jwtSecret: SECRET } } });
    const rowFiltered = signJwt(SECRET, { endpoints: ['items'], filters: { items: { category: 'b' } } });
    const open = signJwt(SECRET, { endpoints: ['items'] });
    const feedUrl = `${api.url}/v1/endpoints/items/changes`;
    const filterQuery = `?filter=${encodeURIComponent(JSON.stringify({ category: 'c' }))}`;
    const byRow = await SseConnection.open(feedUrl, { authorization: `Bearer ${rowFiltered}` });
    const byFilter = await SseConnection.open(`${feedUrl}${filterQuery}`, {
      authorization: `Bearer ${open}`,
    });
    const unfiltered = await SseConnection.open(feedUrl, { authorization: `Bearer ${open}` });
    for (const sub of [byRow, byFilter, unfiltered]) await sub.waitForEvent((e) => e.event === 'live');

    // The endpoint is rebuilt with another schema: `category` is gone (renamed `zone`).
    await writer.run({
      op: 'rebuild',
      fields: { id: 'integer', gen: 'integer', value: 'number', zone: 'string', tags: 'json' },
      indexes: [['value']],
      records: range(1, 50).map((id) => ({ id, gen: 2, value: id, zone: 'b', tags: [] })),
    });
    // A feed without filters follows the switch as ever.
    await unfiltered.waitForEvent((e) => e.event === 'commit', { from: unfiltered.events.length - 1 });
    for (const sub of [byRow, byFilter])
      await waitFor(() => sub.closed || afterLive(sub.events).some((e) => e.event === 'commit'), {
        timeoutMs: 20_000,
        what: 'the filtered feed to end or to finish the switch',
      });
    // The filtered feeds end at the switch, with nothing sent of it (before: `switch`, then a delete of every
    // record they had, then a `commit` — and they stayed open, silent, while their queries were refused).
    expect(afterLive(byRow.events).map((e) => e.event)).toEqual([]);
    expect(afterLive(byFilter.events).map((e) => e.event)).toEqual([]);
    expect([byRow.closed, byFilter.closed]).toEqual([true, true]);
    // Reconnecting from the last token says why, as a query does.
    const refused = async (url: string, token: string, lastId: string) =>
      SseConnection.open(url, { authorization: `Bearer ${token}`, 'last-event-id': lastId }).then(
        () => ({ status: 200, code: undefined }),
        (err: { status: number; body: string }) => ({
          status: err.status,
          code: (JSON.parse(err.body) as { code: string }).code,
        }),
      );
    expect(await refused(feedUrl, rowFiltered, byRow.lastId!)).toEqual({ status: 403, code: 'FORBIDDEN' });
    expect(await refused(`${feedUrl}${filterQuery}`, open, byFilter.lastId!)).toEqual({
      status: 400,
      code: 'INVALID_QUERY',
    });
    unfiltered.kill();
  });
});
