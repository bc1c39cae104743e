/**
 * One client must not take every change-feed slot of an api-server: past `api.changes.maxPerClient` feeds of its own
 * it is refused (429 QUEUE_FULL naming that limit, `retry-after`) while other clients still get theirs, up to
 * `api.changes.maxSubscribers` for the process. A client is its bearer token's subject with auth (a renewed token
 * is the same client), its remote address without; a closed feed frees its slot.
 */
import { signJwt, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startFeedWriter, tempDir } from './feed-harness.js';
import { spawnApiServer, writeConfig } from './helpers.js';
import { SseConnection } from './sse.js';

const SECRET = 'feed-client-limit-secret-0123456789';

const bearer = (claims: Record<string, unknown>) => ({
  authorization: `Bearer ${signJwt(SECRET, { endpoints: ['items'], ...claims })}`,
});

/** A feed that opened (and reached `live`), or the refusal: its status, problem body and `retry-after`. */
type Outcome =
  | { status: 200; feed: SseConnection }
  | { status: number; problem: Record<string, unknown>; retryAfter: unknown };

async function openFeed(
  base: string,
  headers: Record<string, string> = {},
  options: { localAddress?: string } = {},
): Promise<Outcome> {
  try {
    const feed = await SseConnection.open(`${base}/v1/endpoints/items/changes`, headers, options);
    await feed.waitForEvent((e) => e.event === 'live');
    return { status: 200, feed };
  } catch (err) {
    const refusal = err as { status?: number; body?: string; headers?: Record<string, unknown> };
    if (refusal.status === undefined) throw err;
    return {
      status: refusal.status,
      problem: JSON.parse(refusal.body ?? '{}'),
      retryAfter: refusal.headers?.['retry-after'],
    };
  }
}

const feedOf = (outcome: Outcome): SseConnection => {
  if (!('feed' in outcome)) throw new Error(`expected an open feed, got HTTP ${outcome.status}`);
  return outcome.feed;
};

const refusal = (outcome: Outcome) =>
  'feed' in outcome
    ? { status: outcome.status }
    : {
        status: outcome.status,
        code: outcome.problem.code,
        limit: outcome.problem.limit,
        max: outcome.problem.max,
        retryAfter: outcome.retryAfter,
      };

describe('change feeds per client (api.changes.maxPerClient)', () => {
  it('defect: one token opening feeds in a loop took every subscriber slot and a token that had opened none was refused', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    const configPath = await writeConfig(dir.path, {
      dataDir: writer.root,
      api: { auth: { jwtSecret: SECRET }, changes: { maxSubscribers: 4, maxPerClient: 2 } },
    });
    await using api = await spawnApiServer(configPath);
    const greedy = bearer({ sub: 'greedy' });
    const opened: SseConnection[] = [];
    try {
      // One after the other, as a client looping on "open a feed" does.
      const greedyOutcomes: Outcome[] = [];
      for (let i = 0; i < 4; i += 1) greedyOutcomes.push(await openFeed(api.url, greedy));
      for (const outcome of greedyOutcomes) if ('feed' in outcome) opened.push(outcome.feed);
      const patient = await openFeed(api.url, bearer({ sub: 'patient' }));
      if ('feed' in patient) opened.push(patient.feed);
      expect({ greedy: greedyOutcomes.map((o) => o.status), patient: patient.status }).toEqual({
        greedy: [200, 200, 429, 429],
        patient: 200,
      });
      const perClient = {
        status: 429,
        code: 'QUEUE_FULL',
        limit: 'api.changes.maxPerClient',
        max: 2,
        retryAfter: '5',
      };
      expect(refusal(greedyOutcomes[2]!)).toEqual(perClient);
      // A renewed token of the same subject is the same client: its feeds count together.
      const renewed = await openFeed(api.url, bearer({ sub: 'greedy', exp: 4_102_444_800 }));
      expect(refusal(renewed)).toEqual(perClient);

      // The process-wide bound still holds, and says which bound it is.
      opened.push(feedOf(await openFeed(api.url, bearer({ sub: 'third' }))));
      const fifth = await openFeed(api.url, bearer({ sub: 'fourth' }));
      expect(refusal(fifth)).toEqual({
        status: 429,
        code: 'QUEUE_FULL',
        limit: 'api.changes.maxSubscribers',
        max: 4,
        retryAfter: '5',
      });

      const metrics = await (await fetch(`${api.url}/metrics`)).text();
      expect(metrics).toMatch(/^sluice_api_change_refusals_total\{limit="client"\} 3$/m);
      expect(metrics).toMatch(/^sluice_api_change_refusals_total\{limit="server"\} 1$/m);
      expect(metrics).toMatch(/^sluice_api_change_subscribers 4$/m);

      // A closed feed gives its client's slot back (and the process's): the greedy client opens one again.
      const closing = opened.shift()!;
      closing.kill();
      const again = await waitFor(
        async () => {
          const outcome = await openFeed(api.url, greedy);
          return outcome.status === 200 ? outcome : undefined;
        },
        { timeoutMs: 20_000, intervalMs: 100, what: 'the closed feed’s slot to be given back' },
      );
      opened.push(feedOf(again));
      expect(refusal(await openFeed(api.url, greedy))).toMatchObject({ status: 429 });
    } finally {
      for (const feed of opened) feed.kill();
    }
  }, 120_000);

  it('without auth a client is its remote address', async () => {
    await using dir = await tempDir();
    await using writer = await startFeedWriter(dir);
    const configPath = await writeConfig(dir.path, {
      dataDir: writer.root,
      api: { changes: { maxPerClient: 1 } },
    });
    await using api = await spawnApiServer(configPath);
    const opened: SseConnection[] = [];
    try {
      opened.push(feedOf(await openFeed(api.url, {}, { localAddress: '127.0.0.1' })));
      const same = await openFeed(api.url, {}, { localAddress: '127.0.0.1' });
      expect(refusal(same)).toMatchObject({
        status: 429,
        code: 'QUEUE_FULL',
        limit: 'api.changes.maxPerClient',
        max: 1,
      });
      // Another address (the whole 127/8 is loopback) is another client.
      opened.push(feedOf(await openFeed(api.url, {}, { localAddress: '127.0.0.2' })));
    } finally {
      for (const feed of opened) feed.kill();
    }
  }, 120_000);
});
