/**
 * A bearer token's `exp` bounds what it may read: a change feed opened with it ends when it expires, as every
 * request made after that instant is refused. A JWT cannot be revoked; its expiry is the issuer's only way to take
 * access back, so a connection must not outlive it.
 */
import { signJwt, signJwtPayload, waitFor } from '@sluice/testkit';
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

  it('defect: a token whose exp is 1e309 (Infinity) or past any date was taken as never expiring — on data requests and change feeds', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root, { api: { auth: { jwtSecret: SECRET } } });
    await writer.run({ op: 'commit', ops: [upsert(item(1, 2))] });
    const soon = Math.floor(Date.now() / 1000) + 600;
    const answers = async (payload: string) => {
      const authorization = `Bearer ${signJwtPayload(SECRET, payload)}`;
      const record = await fetch(`${api.url}/v1/endpoints/items/records/1`, { headers: { authorization } });
      const query = await fetch(`${api.url}/v1/endpoints/items/query`, {
        method: 'POST',
        headers: { authorization, 'content-type': 'application/json' },
        body: '{"$limit":1}',
      });
      const feed = await SseConnection.open(`${api.url}/v1/endpoints/items/changes`, { authorization }).then(
        (connection) => {
          connection.kill();
          return { status: 200, body: '' };
        },
        (err: { status?: number; message: string }) => ({ status: err.status ?? 0, body: err.message }),
      );
      return {
        record: { status: record.status, body: await record.text() },
        query: { status: query.status, body: await query.text() },
        feed,
      };
    };
    // Malformed time claims: a NumericDate must be a finite number of seconds a date can hold.
    for (const [payload, claim] of [
      ['{"endpoints":"*","exp":1e309}', 'exp'],
      ['{"endpoints":"*","exp":1e300}', 'exp'],
      ['{"endpoints":"*","exp":8640000000001}', 'exp'],
      [`{"endpoints":"*","exp":${soon},"iat":1e309}`, 'iat'],
      [`{"endpoints":"*","exp":${soon},"iat":"yesterday"}`, 'iat'],
    ] as const) {
      const answered = await answers(payload);
      for (const [kind, answer] of Object.entries(answered)) {
        expect(answer.status, `${kind} ${payload}: ${answer.body}`).toBe(401);
        expect(answer.body, `${kind} ${payload}`).toContain('"code":"UNAUTHORIZED"');
        expect(answer.body, `${kind} ${payload}`).toContain(`claim \\"${claim}\\" is invalid`);
      }
    }
    // The verifier itself refuses a string exp, a negative one (long expired), and a nbf it cannot print as a date.
    for (const payload of [
      '{"endpoints":"*","exp":"99999999999"}',
      '{"endpoints":"*","exp":-1}',
      '{"endpoints":"*","exp":-1e300}',
      `{"endpoints":"*","exp":${soon},"nbf":1e309}`,
    ]) {
      for (const [kind, answer] of Object.entries(await answers(payload)))
        expect(answer.status, `${kind} ${payload}: ${answer.body}`).toBe(401);
    }
    // A fractional exp is a NumericDate like any other (RFC 7519 § 2), as is a negative iat.
    for (const payload of [
      `{"endpoints":"*","exp":${soon}.5}`,
      `{"endpoints":"*","exp":${soon},"iat":-1,"nbf":1.5}`,
    ]) {
      for (const [kind, answer] of Object.entries(await answers(payload)))
        expect(answer.status, `${kind} ${payload}: ${answer.body}`).toBe(200);
    }
  });
  it('defect: a token whose exp or nbf the verifier could not read was refused as "malformed", naming no claim', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root, { api: { auth: { jwtSecret: SECRET } } });
    await writer.run({ op: 'commit', ops: [upsert(item(1, 2))] });
    const soon = Math.floor(Date.now() / 1000) + 600;
    for (const [payload, claim] of [
      ['{"endpoints":"*","exp":-1e300}', 'exp'],
      ['{"endpoints":"*","exp":"99999999999"}', 'exp'],
      [`{"endpoints":"*","exp":${soon},"nbf":1e309}`, 'nbf'],
    ] as const) {
      const answer = await fetch(`${api.url}/v1/endpoints/items/records/1`, {
        headers: { authorization: `Bearer ${signJwtPayload(SECRET, payload)}` },
      });
      const body = (await answer.json()) as { code: string; detail: string };
      expect({ status: answer.status, code: body.code }, payload).toEqual({
        status: 401,
        code: 'UNAUTHORIZED',
      });
      expect(body.detail, payload).toContain(`claim "${claim}" is invalid`);
      expect(body.detail, payload).not.toContain('malformed');
    }
  });
});
