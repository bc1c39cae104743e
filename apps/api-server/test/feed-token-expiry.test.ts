/**
 * A bearer token's `exp` bounds what it may read: a change feed opened with it ends when it expires, as every
 * request made after that instant is refused. A JWT cannot be revoked; its expiry is the issuer's only way to take
 * access back, so a connection must not outlive it.
 */
import { signJwt, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startFeedApi, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { SseConnection } from './sse.js';

const SECRET = 'token-expiry-test-secret-0123456789';

describe('change feeds and token expiry', () => {
  it('defect: a change feed kept streaming records after its bearer token expired', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root, { api: { auth: { jwtSecret: SECRET } } });
    // Expires within 2–3 s (JWT times are whole seconds); a token without `exp` never expires.
    const exp = Math.floor(Date.now() / 1000) + 3;
    const expiring = signJwt(SECRET, { endpoints: ['items'], exp });
    const lasting = signJwt(SECRET, { endpoints: ['items'] });
    const open = (token: string) =>
      SseConnection.open(`${api.url}/v1/endpoints/items/changes`, { authorization: `Bearer ${token}` });
    const sub = await open(expiring);
    const other = await open(lasting);
    await sub.waitForEvent((e) => e.event === 'live');
    await other.waitForEvent((e) => e.event === 'live');
    await writer.run({ op: 'commit', ops: [upsert(item(1, 2))] });
    await sub.waitForEvent((e) => e.event === 'commit');

    // Past the token's expiry: a new request with it is refused...
    await waitFor(() => Date.now() > exp * 1000 + 200, { timeoutMs: 10_000, what: 'the token to expire' });
    const refused = await fetch(`${api.url}/v1/endpoints/items/records/1`, {
      headers: { authorization: `Bearer ${expiring}` },
    });
    expect(refused.status).toBe(401);
    // ...and the feed it opened has been ended by the server, so it gets no record written after the expiry.
    await writer.run({ op: 'commit', ops: [upsert(item(2, 9))] });
    const written = (e: { event: string; data: unknown }) =>
      e.event === 'upsert' && (e.data as { record: { gen: number } }).record.gen === 9;
    await other.waitForEvent(written);
    await waitFor(() => sub.closed, { timeoutMs: 10_000, what: 'the expired token’s feed to be ended' });
    expect(sub.events.filter(written)).toEqual([]);
    // The subscriber resumes with a renewed token from its last event id: nothing lost.
    const renewed = await SseConnection.open(`${api.url}/v1/endpoints/items/changes`, {
      authorization: `Bearer ${lasting}`,
      'last-event-id': sub.lastId!,
    });
    const upsert2 = await renewed.waitForEvent((e) => e.event === 'upsert');
    expect(upsert2.data).toMatchObject({ key: [2], record: item(2, 9) });
    // A feed of a token without `exp` is not ended.
    expect(other.closed).toBe(false);
    for (const connection of [sub, other, renewed]) connection.kill();
  });
});
