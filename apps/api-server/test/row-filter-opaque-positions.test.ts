/**
 * A token's row filter hides records, and the positions handed to it must not show them through: a query's `next`
 * cursor and a change feed's event ids are base64url JSON, which anyone can read. Under a row filter they are
 * sealed (authenticated encryption with a key derived from `api.auth.jwtSecret`): a cursor whose scan stopped at
 * `cache.scanCap` on a hidden record does not name that record's sort values or key, and a feed's ids do not carry
 * the change-log sequence (which counts every change, hidden records' included). Positions the server did not seal
 * are not taken from a row-filtered reader: a hand-made one could probe the log.
 */
import { resolveConfig } from '@sluice/core';
import { signJwt } from '@sluice/testkit';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { startApiServer } from '../src/index.js';
import { startFeedApi, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { writeGeneration } from './helpers.js';
import { SseConnection } from './sse.js';

const SECRET = 'opaque-positions-secret-0123456789';
const COUNT = 300;

/** The JSON a position's base64url part holds, or null when it is not readable JSON (sealed). */
function readable(encoded: string): unknown {
  try {
    return JSON.parse(Buffer.from(encoded, 'base64url').toString('utf8'));
  } catch {
    return null;
  }
}

/** The sort values and key a query cursor discloses (`<generation>.<base64url JSON with k>`), or null. */
function disclosedTuple(cursor: string): unknown[] | null {
  const inner = readable(cursor.slice(cursor.indexOf('.') + 1)) as { k?: unknown[] } | null;
  return inner?.k ?? null;
}

/** The change-log sequence a feed event id discloses (`c1.` + base64url `[endpoint, generation, seq, …]`), or null. */
function disclosedSeq(id: string): number | null {
  if (!id.startsWith('c1.')) return null;
  const fields = readable(id.slice(3));
  return Array.isArray(fields) && typeof fields[2] === 'number' ? fields[2] : null;
}

async function query(
  base: string,
  token: string,
  body: Record<string, unknown>,
): Promise<{
  status: number;
  json: { records?: Array<{ id: number }>; next?: string | null; code?: string };
}> {
  const response = await fetch(`${base}/v1/endpoints/items/query`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as never };
}

describe('positions handed to a row-filtered token', () => {
  it('defect: a row-filtered query whose scan stopped at cache.scanCap on a hidden record handed out a next cursor naming that record (its sort values and key)', async () => {
    await using dir = await tempDir();
    await writeGeneration(dir.path, 1, COUNT);
    await using server = await startApiServer({
      config: resolveConfig({
        dataDir: dir.path,
        logLevel: 'silent',
        api: { auth: { jwtSecret: SECRET } },
        cache: { scanCap: 50 },
      }),
      dataDir: dir.path,
      port: 0,
      host: '127.0.0.1',
      logger: pino({ level: 'silent' }),
      watchMs: 50,
    });
    // Tags cycle t0..t4 by id % 5 (fixtures/data.ts) and have no index: the token sees ids 1, 6, 11, …
    const scoped = signJwt(SECRET, {
      endpoints: ['items'],
      filters: { items: { tags: { $contains: 't1' } } },
    });
    const visible = new Set<number>();
    for (let id = 1; id <= COUNT; id += 1) if (id % 5 === 1) visible.add(id);

    // In `value` order (its index) the scan examines ids 1..50 and stops at the cap on id 50, which is hidden (t0).
    const first = await query(server.url, scoped, { $order_by: { value: 'asc' }, $limit: 100 });
    expect(first.status).toBe(200);
    expect(first.json.records!.map((r) => r.id)).toEqual([...visible].filter((id) => id <= 50));
    expect(first.json.next).toEqual(expect.any(String));
    // Before: [50, 50] — the value and the key of record 50, which the token may not see.
    expect(disclosedTuple(first.json.next!)).toBeNull();

    // The sealed cursor still walks: every visible record once, in order, nothing else.
    const walked: number[] = [];
    let after: string | null = null;
    do {
      const page = await query(server.url, scoped, {
        $order_by: { value: 'asc' },
        $limit: 100,
        ...(after ? { $after: after } : {}),
      });
      expect(page.status).toBe(200);
      walked.push(...page.json.records!.map((r) => r.id));
      after = page.json.next ?? null;
    } while (after);
    expect(walked).toEqual([...visible]);

    // A cursor the server did not seal is no cursor for a row-filtered token: one made by hand (or by another
    // token) would let it choose positions. An unfiltered token's own cursors stay as they were (readable).
    const all = signJwt(SECRET, { endpoints: '*' });
    const open = await query(server.url, all, { $order_by: { value: 'asc' }, $limit: 10 });
    expect(disclosedTuple(open.json.next!)).toEqual([10, 10]);
    const plain = await query(server.url, scoped, { $order_by: { value: 'asc' }, $after: open.json.next });
    expect({ status: plain.status, code: plain.json.code }).toEqual({ status: 400, code: 'INVALID_QUERY' });
    // And a sealed cursor is this token's view only: the unfiltered token's query is another $filter.
    const crossed = await query(server.url, all, { $order_by: { value: 'asc' }, $after: first.json.next });
    expect({ status: crossed.status, code: crossed.json.code }).toEqual({
      status: 400,
      code: 'INVALID_QUERY',
    });
  }, 90_000);

  it("defect: a row-filtered change feed's event ids carried the change-log sequence, which counts the changes of records hidden from the token", async () => {
    await using dir = await tempDir();
    // Records 1..50: category a (id % 3 = 0), b (id % 3 = 1), c (id % 3 = 2).
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root, { api: { auth: { jwtSecret: SECRET } } });
    const token = signJwt(SECRET, { endpoints: ['items'], filters: { items: { category: 'b' } } });
    const auth = { authorization: `Bearer ${token}` };
    const url = `${api.url}/v1/endpoints/items/changes`;
    const sub = await SseConnection.open(url, auth);
    await sub.waitForEvent((e) => e.event === 'live');
    // Five changes the token may not see, then one it may.
    await writer.run({
      op: 'commit',
      ops: [2, 3, 5, 6, 8].map((id) => upsert(item(id, 7))).concat(upsert(item(4, 7))),
    });
    await sub.waitForEvent((e) => e.event === 'commit');
    const ids = sub.events.filter((e) => e.id !== undefined).map((e) => [e.event, e.id!]);
    expect(ids.map(([event]) => event)).toEqual(['live', 'upsert', 'commit']);
    // Before: the live id said seq n and the upsert's n + 6 — five hidden changes between them.
    expect(ids.map(([event, id]) => [event, disclosedSeq(id!)])).toEqual([
      ['live', null],
      ['upsert', null],
      ['commit', null],
    ]);
    sub.kill();

    // The sealed id still resumes exactly after it.
    await writer.run({ op: 'commit', ops: [upsert(item(3, 8)), upsert(item(7, 8))] });
    const resumed = await SseConnection.open(url, { ...auth, 'last-event-id': sub.lastId! });
    await resumed.waitForEvent((e) => e.event === 'commit');
    expect(resumed.events.map((e) => [e.event, (e.data as { key?: unknown[] }).key?.[0]])).toEqual([
      ['upsert', 7],
      ['commit', undefined],
    ]);
    resumed.kill();
  }, 90_000);

  it('defect: a row-filtered feed resumed from any sequence written into a hand-made token, so reset reasons told how many changes the log holds', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await using api = await startFeedApi(writer.root, { api: { auth: { jwtSecret: SECRET } } });
    const token = signJwt(SECRET, { endpoints: ['items'], filters: { items: { category: 'b' } } });
    const auth = { authorization: `Bearer ${token}` };
    const url = `${api.url}/v1/endpoints/items/changes`;
    // The generation comes from an unfiltered feed's (readable) token; the view is the row filter's fingerprint,
    // which the filtered feed's ids carried in clear before (sealed now: then any will do, none is taken).
    const open = await SseConnection.open(url, {
      authorization: `Bearer ${signJwt(SECRET, { endpoints: '*' })}`,
    });
    await open.waitForEvent((e) => e.event === 'live');
    open.kill();
    const [endpoint, generation] = readable(open.lastId!.slice(3)) as [string, string, number];
    const filtered = await SseConnection.open(url, auth);
    await filtered.waitForEvent((e) => e.event === 'live');
    filtered.kill();
    const clear = readable(filtered.lastId!.replace(/^c1\./, '')) as unknown[] | null;
    const view = Array.isArray(clear) && typeof clear[3] === 'string' ? clear[3] : '0';
    const handMade = (seq: number) =>
      `c1.${Buffer.from(JSON.stringify([endpoint, generation, seq, view])).toString('base64url')}`;
    // A position far past the log's end and one inside it: before, `reset {unknown-position}` for the first and a
    // resume for the second — a bisection found the log's length. Now both start over alike.
    const firstEvents: unknown[] = [];
    for (const seq of [1_000_000, 1]) {
      const sub = await SseConnection.open(url, { ...auth, 'last-event-id': handMade(seq) });
      await writer.run({ op: 'commit', ops: [upsert(item(10, seq === 1 ? 3 : 4))] });
      await sub.waitForEvent((e) => e.event === 'live' || e.event === 'commit');
      firstEvents.push(sub.events[0]);
      sub.kill();
    }
    expect(firstEvents).toEqual([
      { event: 'reset', data: { reason: 'filter-changed' } },
      { event: 'reset', data: { reason: 'filter-changed' } },
    ]);
  }, 90_000);
});
