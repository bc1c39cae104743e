/**
 * Clients of a long-running host come and go: 550 change feeds on the api-server and 550 endpoint streams on the
 * app-server opened and dropped — closed by the client, or reset when the process holding them is SIGKILLed — while
 * one feed and one stream stay open throughout. Every dropped connection must give back its descriptor, its
 * subscriber slot, its listeners and its timers.
 */
import { processResources, spawnProcess, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startItemsHost } from './helpers.js';
import { SseConnection } from './sse.js';

/** A client process holding `count` event streams of one URL open until it is killed. */
const HOLDER = `
const http = require('node:http');
const [url, count] = process.argv.slice(1);
let open = 0;
for (let i = 0; i < Number(count); i += 1)
  http.get(url, { headers: { accept: 'text/event-stream' }, agent: false }, (res) => {
    if (res.statusCode !== 200) throw new Error('HTTP ' + res.statusCode);
    res.once('data', () => {
      open += 1;
      if (open === Number(count)) console.log('ALL OPEN');
    });
  });
`;

/** Below the default per-client limit of both servers (16 app-server streams per client). */
const HELD_PER_CHILD = 15;

async function openAndDrop(url: string, count: number): Promise<void> {
  for (let done = 0; done < count; done += 10) {
    const batch = await Promise.all(
      Array.from({ length: 10 }, async () => {
        const feed = await SseConnection.open(url);
        await feed.waitForEvent(() => true);
        return feed;
      }),
    );
    for (const feed of batch) feed.kill();
  }
}

async function holdAndKill(url: string): Promise<void> {
  const child = spawnProcess(process.execPath, ['-e', HOLDER, url, String(HELD_PER_CHILD)]);
  await child.waitForLine(/ALL OPEN/, 20_000);
  expect(await child.stop('SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });
}

/** A gauge or counter of a Prometheus text (0 when absent). */
function metric(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

const metricsOf = async (base: string) => (await fetch(`${base}/metrics`)).text();

describe('change feed churn', () => {
  it('550 feeds and 550 endpoint streams opened and dropped leave descriptors, slots, listeners and handles flat', async () => {
    await using host = await startItemsHost('sluice-feed-churn-');
    await waitFor(async () => (await host.status()).records === 400, {
      timeoutMs: 60_000,
      what: 'the cache',
    });
    const [api] = await host.startApiServers(1);
    const urls = { api: `${api!.url}/v1/endpoints/items/changes`, app: `${host.appUrl}/v1/endpoints/stream` };
    const pids = { api: api!.child.pid, app: host.app.pid };
    await using kept = {
      feed: await SseConnection.open(urls.api),
      stream: await SseConnection.open(urls.app),
      async [Symbol.asyncDispose]() {
        this.feed.kill();
        this.stream.kill();
      },
    };
    await kept.feed.waitForEvent((e) => e.event === 'live');
    await kept.stream.waitForEvent(() => true);

    const measure = async () => {
      // Only the two kept connections remain once the dropped ones are noticed.
      const settled = await waitFor(
        async () => {
          const [apiText, appText] = await Promise.all([metricsOf(api!.url), metricsOf(host.appUrl)]);
          return metric(apiText, 'sluice_api_change_subscribers') === 1 &&
            metric(appText, 'sluice_endpoint_stream_watchers') === 1
            ? { apiText, appText }
            : null;
        },
        { timeoutMs: 20_000, what: 'dropped feeds and streams released' },
      );
      return {
        api: {
          fds: processResources(pids.api).fds,
          handles: metric(settled.apiText, 'sluice_api_nodejs_active_handles_total'),
        },
        app: {
          fds: processResources(pids.app).fds,
          handles: metric(settled.appText, 'sluice_node_nodejs_active_handles_total'),
        },
      };
    };

    const round = async () => {
      await openAndDrop(urls.api, 40);
      await openAndDrop(urls.app, 40);
      await holdAndKill(urls.api);
      await holdAndKill(urls.app);
    };
    await round();
    const warm = await measure();
    for (let i = 1; i < 10; i += 1) await round();
    const after = await measure();

    for (const side of ['api', 'app'] as const) {
      expect(after[side].fds, `${side} fds (after the first round: ${warm[side].fds})`).toBeLessThanOrEqual(
        warm[side].fds + 5,
      );
      expect(
        after[side].handles,
        `${side} active handles (after the first round: ${warm[side].handles})`,
      ).toBeLessThanOrEqual(warm[side].handles + 3);
    }
    // A listener added per connection and never removed shows as this warning long before memory does.
    expect(api!.child.lines.filter((l) => /MaxListenersExceeded/.test(l))).toEqual([]);
    expect(host.app.lines.filter((l) => /MaxListenersExceeded/.test(l))).toEqual([]);
    // The kept feed and stream still work.
    expect(kept.feed.closed).toBe(false);
    expect(kept.stream.closed).toBe(false);
  }, 120_000);
});
