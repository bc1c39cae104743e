/**
 * A checkpoint's positions count and measure what the pipeline read and wrote: the cache sink's `written` / `read` /
 * `bad`, a file source's line count and byte offset, a processor's `processed`. A token whose row filter hides
 * records must not learn from them how many records exist, so `GET /v1/endpoints`, `GET /v1/endpoints/:name` and the
 * change feed's `commit` events give it only what read-your-writes needs: each replication source's LSN.
 */
import { signJwt } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { range, startFeedApi, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { SseConnection, type SseEvent } from './sse.js';

const SECRET = 'row-filter-positions-secret-0123456789';

/** The positions of an endpoint fed by a JSONL file and a replication source, as the pipeline checkpoints them. */
function positionsAt(lsn: string, written: number): Record<string, unknown> {
  return {
    'items.file': {
      offset: written * 64,
      line: written,
      read: written,
      head: 'h'.repeat(43),
      headLength: 4096,
      tail: 't'.repeat(43),
      tailLength: 60,
      header: null,
    },
    'items.pg': {
      capture: 'replication',
      slot: 'sluice_items',
      publication: 'sluice_items',
      phase: 'stream',
      lsn,
      lastKey: ['42'],
      catchUp: null,
      columns: [['id', 23]],
      read: written,
    },
    'items.select': { processed: written },
    'items.cache': { written, read: written, bad: 3 },
  };
}

/** What a row-filtered token may see of `positionsAt(lsn, …)`: the replication source's LSN, nothing else. */
const visibleAt = (lsn: string) => ({ 'items.pg': { lsn } });

describe('row filters and checkpoint positions', () => {
  it('defect: checkpoint positions told a row-filtered token the sink counters and the file source line count/offset (how many records exist)', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir, {
      initial: range(1, 30).map((id) => item(id, 1)),
    });
    await using api = await startFeedApi(writer.root, { api: { auth: { jwtSecret: SECRET } } });
    const scoped = signJwt(SECRET, { endpoints: ['items'], filters: { items: { category: 'b' } } });
    const open = signJwt(SECRET, { endpoints: '*' });
    const headers = (token: string) => ({ authorization: `Bearer ${token}` });
    const filteredFeed = await SseConnection.open(`${api.url}/v1/endpoints/items/changes`, headers(scoped));
    const fullFeed = await SseConnection.open(`${api.url}/v1/endpoints/items/changes`, headers(open));
    await filteredFeed.waitForEvent((e) => e.event === 'live');
    await fullFeed.waitForEvent((e) => e.event === 'live');
    const resumeFrom = filteredFeed.lastId!;

    await writer.run({ op: 'commit', ops: [upsert(item(31, 1))], positions: positionsAt('0/16B3748', 2000) });
    const commitOf = async (feed: SseConnection, nth: number) =>
      (await feed.waitForEvent((e: SseEvent) => e.event === 'commit', { count: nth })).data as {
        position: unknown;
        epoch: number;
      };

    const get = async (path: string, token: string) => {
      const response = await fetch(`${api.url}${path}`, { headers: headers(token) });
      return {
        status: response.status,
        position: response.headers.get('sluice-position'),
        body: (await response.json()) as Record<string, unknown>,
      };
    };
    const one = await get('/v1/endpoints/items', scoped);
    expect(one.status).toBe(200);
    // Before: {"items.file":{"offset":128000,"line":2000,…},"items.cache":{"written":2000,"read":2000,"bad":3},…}
    expect((one.body.checkpoint as { positions: unknown }).positions).toEqual(visibleAt('0/16B3748'));
    expect(one.position).toBe('items.pg="0/16B3748"');
    const list = await get('/v1/endpoints', scoped);
    const listed = list.body.endpoints as Array<{ checkpoint: { positions: unknown } }>;
    expect(listed.map((e) => e.checkpoint.positions)).toEqual([visibleAt('0/16B3748')]);
    expect((await commitOf(filteredFeed, 1)).position).toEqual(visibleAt('0/16B3748'));

    // Read-your-writes still works for the row-filtered token: the LSN is what sluice-min-position compares.
    const fresh = await fetch(`${api.url}/v1/endpoints/items/count`, {
      method: 'POST',
      headers: { ...headers(scoped), 'content-type': 'application/json', 'sluice-min-position': '0/16B3748' },
      body: '{}',
    });
    expect(fresh.status).toBe(200);

    // A token without a row filter hides nothing, so it keeps every position.
    const full = await get('/v1/endpoints/items', open);
    expect((full.body.checkpoint as { positions: unknown }).positions).toEqual(
      positionsAt('0/16B3748', 2000),
    );
    expect((await commitOf(fullFeed, 1)).position).toEqual(positionsAt('0/16B3748', 2000));

    // A resumed feed (catch-up from the log) and the commit after a switch are left out the same way.
    const resumed = await SseConnection.open(`${api.url}/v1/endpoints/items/changes`, {
      ...headers(scoped),
      'last-event-id': resumeFrom,
    });
    expect((await commitOf(resumed, 1)).position).toEqual(visibleAt('0/16B3748'));
    await writer.run({
      op: 'rebuild',
      records: range(1, 40).map((id) => item(id, 2)),
      positions: positionsAt('0/2000000', 40),
    });
    await filteredFeed.waitForEvent((e) => e.event === 'switch');
    expect((await commitOf(filteredFeed, 2)).position).toEqual(visibleAt('0/2000000'));
    expect((await commitOf(fullFeed, 2)).position).toEqual(positionsAt('0/2000000', 40));
    expect((await commitOf(resumed, 2)).position).toEqual(visibleAt('0/2000000'));
    for (const feed of [filteredFeed, fullFeed, resumed]) feed.kill();
  }, 90_000);
});
