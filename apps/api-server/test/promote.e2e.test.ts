/**
 * An operator's gated switch under query load: one `sluice-app-server` process (switch mode manual) builds generation
 * 2 of the source and holds it; two `sluice-api-server` processes keep serving generation 1 meanwhile. A promote sent
 * from two tabs at once moves the alias once, and both api-servers switch on it as on a rebuild: zero failed
 * requests, every response's records of the generation its `sluice-cache` header names. A rollback to a generation
 * whose source cannot resume (the file was rewritten) is refused under the same load and nothing moves.
 */
import { waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  allAnswerFrom,
  fetchJson,
  ITEMS_COUNT_BY_GEN,
  moved,
  startItemsHost,
  startLoad,
  switchesOf,
} from './helpers.js';

const BLUE_COUNT = ITEMS_COUNT_BY_GEN[1]!;
const GREEN_COUNT = ITEMS_COUNT_BY_GEN[2]!;

describe('promote behind a real app-server', () => {
  it('serves the held generation to nobody, then switches both api-servers on one promote under load with zero failed requests', async () => {
    await using host = await startItemsHost('sluice-api-promote-', {
      extra: { cache: { gcGraceMs: 3_600_000 } },
      endpoint: { switch: { mode: 'manual' } },
    });
    const { appUrl } = host;
    const blue = (
      await waitFor(async () => ((await host.status())?.records === BLUE_COUNT ? host.status() : null), {
        timeoutMs: 30_000,
        what: 'the first generation',
      })
    ).servingCache as string;
    const urls = (await host.startApiServers(2)).map((s) => s.url);
    await waitFor(() => allAnswerFrom(urls, blue), { timeoutMs: 30_000, what: 'both api-servers on blue' });
    const switchesBefore = await Promise.all(
      urls.map(async (u) => switchesOf(await (await fetch(`${u}/metrics`)).text(), 'items')),
    );

    // Generation 2 of the source, rebuilt and held (manual mode): readers keep getting generation 1.
    await host.writeSource(2);
    let green = '';
    const genOf = (cache: string) => (cache === blue ? 1 : cache === green ? 2 : undefined);
    const load = startLoad({
      urls,
      concurrency: 16,
      endpoint: 'items',
      ids: BLUE_COUNT,
      genOf,
      countOf: (gen) => ITEMS_COUNT_BY_GEN[gen]!,
    });
    expect((await fetchJson(`${appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const held = await waitFor(
      async () => {
        const items = await host.status();
        return items.phase === 'held' ? items : null;
      },
      { timeoutMs: 30_000, what: 'the rebuild to be held' },
    );
    green = (held.held as { cache: string }).cache;
    expect(held.servingCache).toBe(blue);
    const listed = await fetchJson(`${appUrl}/v1/endpoints/items/generations`);
    expect(listed.body.generations[0]).toMatchObject({ name: green, state: 'held', records: GREEN_COUNT });
    const requestsWhileHeld = load.stats.requests;
    await waitFor(() => load.stats.requests > requestsWhileHeld + 300, {
      timeoutMs: 20_000,
      what: 'load while the green is held',
    });
    expect(load.stats.byCache.get(green) ?? 0).toBe(0);

    // Promote from two tabs at once: one switch.
    const promotes = await Promise.all(
      [0, 1].map(() => fetchJson(`${appUrl}/v1/endpoints/items/promote`, { method: 'POST' })),
    );
    expect(promotes.map((p) => p.status)).toEqual([200, 200]);
    expect(promotes.map((p) => p.body.changed).sort()).toEqual([false, true]);
    expect(promotes.find((p) => p.body.changed)!.body).toEqual(moved('promote', blue, green));
    await waitFor(() => allAnswerFrom(urls, green), {
      timeoutMs: 20_000,
      what: 'both api-servers to answer from green',
    });

    // Blue's file was rewritten: it cannot be continued, so the rollback is refused and nothing moves.
    const refused = await fetchJson(`${appUrl}/v1/endpoints/items/rollback`, { method: 'POST' });
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('CANNOT_RESUME');
    const stats = await load.stopAfter(600, { timeoutMs: 30_000, what: 'load after the promote' });

    expect(stats.failures.slice(0, 5)).toEqual([]);
    expect(stats.mixed.slice(0, 5)).toEqual([]);
    expect([...stats.byCache.keys()].sort()).toEqual([blue, green].sort());
    expect(stats.byCache.get(blue)).toBeGreaterThan(100);
    expect(stats.byCache.get(green)).toBeGreaterThan(100);
    expect(await allAnswerFrom(urls, green)).toBe(true);
    const switchesAfter = await Promise.all(
      urls.map(async (u) => switchesOf(await (await fetch(`${u}/metrics`)).text(), 'items')),
    );
    expect(switchesAfter).toEqual(switchesBefore.map((n) => n + 1));
    const history = (await fetchJson(`${appUrl}/v1/endpoints/items/generations`)).body.history;
    expect(
      history.map((h: { from: string | null; to: string; cause: string }) => [h.from, h.to, h.cause]),
    ).toEqual([
      [blue, green, 'promote'],
      [null, blue, 'restart'],
    ]);
  }, 120_000);
});
