/**
 * Read-your-writes on every read route: the change feed honours `sluice-min-position` as the other endpoint routes
 * do (a malformed value is 400 before the stream starts, a position not committed yet is waited for before the
 * snapshot, one not reached in time is 503 POSITION_NOT_REACHED), and the endpoint list, which reads no single
 * endpoint, refuses it rather than answering as if it had waited. A writer process (the app-server's role) commits
 * replication positions; the api-server is real (HTTP, LMDB read-only).
 */
import { describe, expect, it } from 'vitest';
import { startFeedApi, startFeedWriter, tempDir, upsert } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { SseConnection } from './sse.js';

const FEED = '/v1/endpoints/items/changes';

/** A replication source's position, as the app-server commits it. */
const at = (lsn: string) => ({ 'items.source': { capture: 'replication', phase: 'stream', lsn } });

/** The status, problem and `retry-after` of a refused subscription, or the events of one that opened up to `live`. */
async function answerTo(url: string, headers: Record<string, string>) {
  try {
    const opened = await SseConnection.open(url, headers);
    await opened.waitForEvent((e) => e.event === 'live');
    opened.kill();
    return { status: 200, events: opened.events };
  } catch (err) {
    const {
      status,
      body,
      headers: answered,
    } = err as {
      status: number;
      body: string;
      headers: Record<string, string>;
    };
    if (status === undefined) throw err;
    return { status, problem: JSON.parse(body), retryAfter: answered['retry-after'] };
  }
}

describe('read-your-writes on the change feed and the endpoint list', () => {
  it('defect: the change feed ignored sluice-min-position — garbage opened a stream, a position not committed yet or never committed opened it at once, without the write in its snapshot', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await writer.run({
      op: 'rebuild',
      records: [1, 2, 3].map((id) => item(id, 1)),
      positions: at('0/100'),
    });
    await using api = await startFeedApi(writer.root, { api: { freshnessWaitMs: 1_000 } });
    const url = `${api.url}${FEED}`;

    // Malformed, or naming a source the endpoint does not have: 400 at the header, before any stream bytes.
    for (const header of ['garbage', 'items.source=0/1', 'other.source="0/1"'])
      expect(await answerTo(url, { 'sluice-min-position': header }), header).toMatchObject({
        status: 400,
        problem: { code: 'VALIDATION_FAILED', errors: [{ path: 'headers.sluice-min-position' }] },
      });
    // Never committed within api.freshnessWaitMs: 503 with retry-after, no stream.
    expect(await answerTo(url, { 'sluice-min-position': '0/900' })).toMatchObject({
      status: 503,
      problem: { code: 'POSITION_NOT_REACHED', detail: expect.stringContaining('items.source="0/100"') },
      retryAfter: '1',
    });
    // Already committed: opens as without the header.
    const reached = await answerTo(url, { 'sluice-min-position': 'items.source="0/100"' });
    expect(reached.status).toBe(200);

    // Asked for before the commit that writes record 77 exists: the feed waits for it, and its snapshot has it.
    const opening = SseConnection.open(url, { 'sluice-min-position': '0/300' });
    // Ordering only: the request reaches the server before the commit is made.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await writer.run({ op: 'commit', ops: [upsert(item(77, 1))], positions: at('0/300') });
    const feed = await opening;
    await feed.waitForEvent((e) => e.event === 'live');
    const live = feed.events.findIndex((e) => e.event === 'live');
    const snapshot = feed.events.slice(0, live).map((e) => (e.data as { key: number[] }).key[0]);
    expect(snapshot.sort((a, b) => a! - b!)).toEqual([1, 2, 3, 77]);
    feed.kill();
  }, 90_000);

  it('a client that leaves while its feed waits for a position holds no subscription once the position is committed', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await writer.run({ op: 'rebuild', records: [item(1, 1)], positions: at('0/100') });
    // One subscriber at most: a subscription left behind by the gone client would refuse the next one (429).
    await using api = await startFeedApi(writer.root, {
      api: { freshnessWaitMs: 10_000, changes: { maxSubscribers: 1 } },
    });
    const url = `${api.url}${FEED}`;
    const controller = new AbortController();
    const gone = fetch(url, { headers: { 'sluice-min-position': '0/300' }, signal: controller.signal });
    // Ordering only: the request waits on the server before the client leaves.
    await new Promise((resolve) => setTimeout(resolve, 300));
    controller.abort();
    await gone.catch(() => undefined);
    await writer.run({ op: 'commit', ops: [upsert(item(2, 1))], positions: at('0/300') });
    // The waiter wakes at that commit (one shared 1 ms look); ordering only, as above.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const next = await answerTo(url, { 'sluice-min-position': '0/300' });
    expect(next).toMatchObject({ status: 200 });
  }, 90_000);

  it('defect: GET /v1/endpoints ignored sluice-min-position (garbage answered 200, as if the list had waited) — now refused at the header, and the OpenAPI says so', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await writer.run({ op: 'rebuild', records: [item(1, 1)], positions: at('0/100') });
    await using api = await startFeedApi(writer.root);
    for (const header of ['garbage', '0/100', 'items.source="0/100"']) {
      const response = await fetch(`${api.url}/v1/endpoints`, { headers: { 'sluice-min-position': header } });
      expect(response.status, header).toBe(400);
      expect(await response.json(), header).toMatchObject({
        code: 'VALIDATION_FAILED',
        errors: [
          {
            path: 'headers.sluice-min-position',
            message: expect.stringContaining('GET /v1/endpoints/{name}'),
          },
        ],
      });
    }
    expect((await fetch(`${api.url}/v1/endpoints`)).status).toBe(200);

    const doc = (await (await fetch(`${api.url}/docs/json`)).json()) as {
      paths: Record<
        string,
        Record<string, { parameters?: Array<{ in: string; name: string; description?: string }> }>
      >;
    };
    const header = (path: string) =>
      doc.paths[path]?.get?.parameters?.find((p) => p.in === 'header' && p.name === 'sluice-min-position');
    expect(header('/v1/endpoints')?.description).toContain('refused');
    expect(header('/v1/endpoints/{name}/changes')?.description).toContain('POSITION_NOT_REACHED');
  }, 90_000);

  it('defect: a change feed answered 200 without sluice-cache, sluice-checkpoint and sluice-position, the headers of every other data response', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    const blue = await writer.run({ op: 'rebuild', records: [item(1, 1)], positions: at('0/100') });
    await using api = await startFeedApi(writer.root, { api: { freshnessWaitMs: 10_000 } });
    const url = `${api.url}${FEED}`;
    /** The freshness headers of a 200 feed (opened up to `live`, then closed). */
    const feedHeaders = async (headers: Record<string, string> = {}) => {
      const feed = await SseConnection.open(url, headers);
      await feed.waitForEvent((e) => e.event === 'live');
      feed.kill();
      const {
        'sluice-cache': cache,
        'sluice-checkpoint': checkpoint,
        'sluice-position': position,
      } = feed.res.headers;
      return { cache, checkpoint, position };
    };
    const query = await fetch(`${api.url}/v1/endpoints/items/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    // The generation the feed starts from and its commit, as a query of that generation names them.
    const opened = await feedHeaders();
    expect(opened).toEqual({
      cache: blue,
      checkpoint: query.headers.get('sluice-checkpoint'),
      position: 'items.source="0/100"',
    });
    expect(opened.checkpoint).toMatch(/^epoch=\d+, at="/);

    // A feed that waited for a position across a switch names the generation it starts from after the wait.
    const waiting = feedHeaders({ 'sluice-min-position': '0/300' });
    // Ordering only: the request waits on the server before the switch.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const green = await writer.run({ op: 'rebuild', records: [item(1, 2)], positions: at('0/300') });
    expect(green).not.toBe(blue);
    expect(await waiting).toMatchObject({ cache: green, position: 'items.source="0/300"' });
  }, 90_000);
});
