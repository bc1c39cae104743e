/**
 * A read with `sluice-min-position` may wait across a blue/green switch: the generation that answers is then not
 * the one its token's row filter was checked against when the request came in. Whatever generation answers, a
 * row filter that does not fit it is 403 FORBIDDEN, as it is for a read that did not wait. A writer process (the
 * app-server's role) commits replication positions and rebuilds; the api-server is real (HTTP, LMDB read-only).
 */
import { signJwt, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { range, startFeedApi, startFeedWriter, tempDir } from './feed-harness.js';
import { item } from './fixtures/data.js';
import { SseConnection } from './sse.js';

const SECRET = 'fresh-row-filter-secret-0123456789';

/** A replication source's position, as the app-server commits it. */
const at = (lsn: string) => ({ 'items.source': { capture: 'replication', phase: 'stream', lsn } });

/** Every read route of `items`: method, path and body. */
const READS = [
  ['GET', '/v1/endpoints/items', undefined],
  ['GET', '/v1/endpoints/items/records/1', undefined],
  ['POST', '/v1/endpoints/items/query', {}],
  ['POST', '/v1/endpoints/items/count', {}],
] as const;

/** The status and problem code (or record count) of each read route, sent with `headers`. */
async function readAll(base: string, headers: Record<string, string>) {
  return Promise.all(
    READS.map(async ([method, path, body]) => {
      const response = await fetch(`${base}${path}`, {
        method,
        headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const json = (await response.json()) as { code?: string };
      return { path, status: response.status, code: json.code };
    }),
  );
}

/** The status and code of a change feed subscription that is refused, or 200 once it is live. */
async function subscribe(url: string, headers: Record<string, string>) {
  try {
    const feed = await SseConnection.open(url, headers);
    await feed.waitForEvent((e) => e.event === 'live');
    feed.kill();
    return { path: 'changes', status: 200, code: undefined };
  } catch (err) {
    const { status, body } = err as { status?: number; body: string };
    if (status === undefined) throw err;
    return { path: 'changes', status, code: (JSON.parse(body) as { code: string }).code };
  }
}

describe('read-your-writes across a switch, with a row-filtered token', () => {
  it("defect: a read that waited for sluice-min-position across a switch to a generation without the row filter's field was not refused 403 as a read that did not wait is", async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    await writer.run({
      op: 'rebuild',
      records: range(1, 9).map((id) => item(id, 1)),
      positions: at('0/100'),
    });
    await using api = await startFeedApi(writer.root, {
      api: { auth: { jwtSecret: SECRET }, freshnessWaitMs: 20_000 },
    });
    const token = signJwt(SECRET, { endpoints: ['items'], filters: { items: { category: 'b' } } });
    const bearer = { authorization: `Bearer ${token}` };
    // The filter fits the serving generation: every read route answers.
    for (const answer of await readAll(api.url, bearer))
      expect(answer, answer.path).toMatchObject({ status: 200 });
    const first = api.registry.current('items')?.name;

    // Asked for a position only the next generation commits; that generation has no `category` (renamed `zone`).
    const waiting = readAll(api.url, { ...bearer, 'sluice-min-position': '0/300' });
    const waitingFeed = subscribe(`${api.url}/v1/endpoints/items/changes`, {
      ...bearer,
      'sluice-min-position': '0/300',
    });
    // Ordering only: the requests reach the server (and start waiting) before the switch.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await writer.run({
      op: 'rebuild',
      fields: { id: 'integer', gen: 'integer', value: 'number', zone: 'string', tags: 'json' },
      indexes: [['value']],
      records: range(1, 9).map((id) => ({ id, gen: 2, value: id, zone: 'b', tags: [] })),
      positions: at('0/300'),
    });

    // The writer has moved the alias; the api-server serves the new generation once it has seen that.
    await waitFor(() => api.registry.current('items')?.name !== first, {
      timeoutMs: 30_000,
      what: 'the api-server to serve the new generation',
    });
    // Without the wait, the new generation refuses the token on every route.
    const forbidden = (path: string) => ({ path, status: 403, code: 'FORBIDDEN' });
    expect(await readAll(api.url, bearer)).toEqual(READS.map(([, path]) => forbidden(path)));
    // After the wait, the same.
    expect(await waiting).toEqual(READS.map(([, path]) => forbidden(path)));
    expect(await waitingFeed).toEqual(forbidden('changes'));
  }, 90_000);
});
