/**
 * A change feed under a row filter (a token's, or `filter=`) says nothing about records outside it: not their
 * keys, not when they change. A record that leaves the view is a delete (the subscriber had it); one that was
 * never in it is no event at all — the cache's change log keeps what each change replaced, so the feed can tell.
 */
import { signJwt } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { del, startFeedApi, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { SseConnection } from './sse.js';

const SECRET = 'hidden-keys-test-secret-0123456789';

describe('defect: a row-filtered change feed sent the keys of records hidden from it', () => {
  it('changes and deletes of hidden records are no events; leaving the view is a delete, entering it an upsert', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root, { api: { auth: { jwtSecret: SECRET } } });
    // The token sees category b only (ids with id % 3 = 1).
    const token = signJwt(SECRET, { endpoints: ['items'], filters: { items: { category: 'b' } } });
    const sub = await SseConnection.open(`${api.url}/v1/endpoints/items/changes`, {
      authorization: `Bearer ${token}`,
    });
    await sub.waitForEvent((e) => e.event === 'live');
    await writer.run({
      op: 'commit',
      ops: [
        upsert(item(2, 5)), // hidden (c) before and after: nothing
        del(3), // hidden (a), deleted: nothing
        upsert(item(101, 1)), // new, hidden (c): nothing
        upsert({ ...item(1, 1), category: 'a' }), // was visible, leaves: delete 1
        upsert(item(4, 2)), // visible, changed: upsert 4
        del(7), // visible, deleted: delete 7
        upsert({ ...item(5, 1), category: 'b' }), // was hidden (c), enters: upsert 5
      ],
    });
    await sub.waitForEvent((e) => e.event === 'commit');
    const live = sub.events.slice(sub.events.findIndex((e) => e.event === 'live') + 1);
    // Before: delete 2, delete 3 and delete 101 too — the keys (and the timing) of records the token may not see.
    expect(live.map((e) => [e.event, (e.data as { key?: unknown[] }).key?.[0]])).toEqual([
      ['delete', 1],
      ['upsert', 4],
      ['delete', 7],
      ['upsert', 5],
      ['commit', undefined],
    ]);
    sub.kill();
  });
});
