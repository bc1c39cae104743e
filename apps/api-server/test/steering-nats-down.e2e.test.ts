/**
 * An operator's promote and rollback while the host's nats-server is away — killed (SIGKILL: connections reset) or
 * frozen (SIGSTOP: connections still count as up, nothing is answered) — under a steady load of lookups, queries and
 * counts on two api-servers: each api-server follows each switch from the alias table with no failed request and no
 * answer from another generation than its `sluice-cache` header names, switches once per move, and neither switches
 * again nor back when NATS returns and the kept redirects are published.
 */
import { waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allAnswerFrom, fetchJson, ITEMS_COUNT_BY_GEN, startItemsHost, startLoad } from './helpers.js';

/** The `sluice_api_switches_total` lines of each api-server. */
const switchLines = (urls: string[]) =>
  Promise.all(
    urls.map(async (url) =>
      (await (await fetch(`${url}/metrics`)).text())
        .split('\n')
        .filter((line) => line.startsWith('sluice_api_switches_total')),
    ),
  );

const OUTAGES = { killed: 'kill', frozen: 'pause' } as const;

describe('steering while NATS is away', () => {
  for (const [outage, how] of Object.entries(OUTAGES)) {
    it(`NATS ${outage}: a promote and a rollback reach both api-servers under load, each switch once, nothing more when NATS is back`, {
      timeout: 120_000,
    }, async () => {
      await using host = await startItemsHost(`sluice-api-steer-nats-${how}-`, {
        extra: { cache: { gcGraceMs: 3_600_000 }, api: { reconcileMs: 600_000 } },
        endpoint: { switch: { mode: 'manual' } },
      });
      const { appUrl } = host;
      const blue = (
        await waitFor(
          async () => ((await host.status())?.records === ITEMS_COUNT_BY_GEN[1] ? host.status() : null),
          {
            timeoutMs: 30_000,
            what: 'the first generation',
          },
        )
      ).servingCache as string;
      const urls = (await host.startApiServers(2)).map((server) => server.url);
      await waitFor(() => allAnswerFrom(urls, blue), { timeoutMs: 30_000, what: 'both api-servers on blue' });
      let green = '';
      // The source is not rewritten: both generations hold generation 1 of the items.
      const load = startLoad({
        urls,
        concurrency: 8,
        endpoint: 'items',
        ids: ITEMS_COUNT_BY_GEN[1]!,
        genOf: (cache) => (cache === blue || cache === green ? 1 : undefined),
        countOf: (gen) => ITEMS_COUNT_BY_GEN[gen]!,
      });

      if (how === 'kill') await host.nats.kill();
      else host.nats.pause();
      try {
        expect((await fetchJson(`${appUrl}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(
          202,
        );
        const held = await waitFor(
          async () => {
            const items = await host.status();
            return items.phase === 'held' ? items : null;
          },
          { timeoutMs: 60_000, what: 'the rebuild to be held' },
        );
        green = (held.held as { cache: string }).cache;
        const promote = await fetchJson(`${appUrl}/v1/endpoints/items/promote`, { method: 'POST' });
        expect([promote.status, promote.body.changed]).toEqual([200, true]);
        await waitFor(() => allAnswerFrom(urls, green), {
          timeoutMs: 20_000,
          what: 'both api-servers on green',
        });
        const rollback = await fetchJson(`${appUrl}/v1/endpoints/items/rollback`, { method: 'POST' });
        expect([rollback.status, rollback.body.changed, rollback.body.to]).toEqual([200, true, blue]);
        await waitFor(() => allAnswerFrom(urls, blue), {
          timeoutMs: 20_000,
          what: 'both api-servers on blue again',
        });
      } finally {
        if (how === 'kill') await host.nats.start();
        else host.nats.resume();
      }
      await waitFor(
        async () => {
          for (const url of urls)
            if ((await fetchJson(`${url}/readyz`)).body.backplane !== 'connected') return false;
          return true;
        },
        { timeoutMs: 40_000, what: 'both api-servers connected to NATS again' },
      );
      // The kept redirects reach NATS now; given the time to arrive, they must not move anyone.
      const stats = await load.stopAfter(3_000, { timeoutMs: 30_000, what: 'load once NATS is back' });

      expect(stats.failures.slice(0, 5)).toEqual([]);
      expect(stats.mixed.slice(0, 5)).toEqual([]);
      expect(stats.byCache.get(green)).toBeGreaterThan(0);
      expect(await allAnswerFrom(urls, blue)).toBe(true);
      expect(await switchLines(urls)).toEqual(
        urls.map(() => ['sluice_api_switches_total{endpoint="items",reason="watch"} 2']),
      );
    });
  }
});
