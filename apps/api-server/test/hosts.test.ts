import { type NatsServerHandle, startNatsServer } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildGeneration } from './fixtures/data.js';
import {
  answeringCache,
  eventSwitchesOf,
  otherSwitchesOf,
  type SpawnedApiServer,
  spawnApiServer,
  timeSwitch,
  writeConfig,
} from './helpers.js';
import { startWriterHost, type WriterHost } from './writer-host.js';

/**
 * Two hosts share one nats-server: host A (two real api-servers over its own dataDir, `node.id: host-a`) and host
 * B (this process rebuilding B's own dataDir and publishing as `host-b`, as B's app-server would). B's alias
 * versions run ahead of A's; A must still switch on A's own event, at once.
 */
const COUNT = 200;
/** Far away, so that only the event can explain a switch within the test (the table watch idles while connected). */
const RECONCILE_MS = 120_000;

let nats: NatsServerHandle;
let hostA: WriterHost;
let hostB: WriterHost;
let serversA: SpawnedApiServer[] = [];
let genA = 0;
let genB = 0;

beforeAll(async () => {
  nats = await startNatsServer();
  [hostA, hostB] = await Promise.all([
    startWriterHost(nats.url, { prefix: 'sluice-host-a-', nodeId: 'app-a' }),
    startWriterHost(nats.url, { prefix: 'sluice-host-b-', nodeId: 'app-b' }),
  ]);
  genA += 1;
  await buildGeneration(hostA.manager, 'items', genA, COUNT, hostA.publisher, undefined, 'host-a');
  const config = await writeConfig(hostA.dir.path, {
    node: { id: 'host-a' },
    dataDir: hostA.dir.path,
    nats: nats.url,
    api: { reconcileMs: RECONCILE_MS },
  });
  serversA = await Promise.all([spawnApiServer(config), spawnApiServer(config)]);
}, 120_000);

afterAll(async () => {
  for (const server of serversA) await server[Symbol.asyncDispose]();
  await hostA?.[Symbol.asyncDispose]();
  await hostB?.[Symbol.asyncDispose]();
  await nats?.[Symbol.asyncDispose]();
});

describe('defect 7: alias events of different hosts collide', () => {
  it("after several rebuilds on host B, host A's api-servers switch to A's new generation by A's event, promptly", async () => {
    const urls = serversA.map((s) => s.url);
    // Host B rebuilds several times: its alias version runs ahead of A's.
    for (let i = 0; i < 4; i += 1) {
      genB += 1;
      await buildGeneration(hostB.manager, 'items', genB, COUNT, hostB.publisher, undefined, 'host-b');
    }
    const before = await Promise.all(urls.map((u) => answeringCache(u)));
    const blue = hostA.manager.resolveAlias('items')!.cache;
    expect(before).toEqual([blue, blue]);

    const durations: number[] = [];
    for (let round = 0; round < 3; round += 1) {
      genB += 1;
      await buildGeneration(hostB.manager, 'items', genB, COUNT, hostB.publisher, undefined, 'host-b');
      genA += 1;
      durations.push(
        await timeSwitch(
          (onBuilt) =>
            buildGeneration(hostA.manager, 'items', genA, COUNT, hostA.publisher, onBuilt, 'host-a'),
          urls,
          {
            timeoutMs: 10_000,
            intervalMs: 5,
            what: "both of host A's api-servers to serve A's new generation",
          },
        ),
      );
    }
    for (const url of urls) {
      const metrics = await (await fetch(`${url}/metrics`)).text();
      // Every switch was by A's event: neither the reconcile nor the table watch.
      expect(eventSwitchesOf(metrics, 'items')).toBe(3);
      expect(otherSwitchesOf(metrics, 'items')).toBe(0);
      expect(metrics).toContain('sluice_api_backplane_connected 1');
      // Never tried to open one of B's cache names in A's dataDir.
      expect(metrics).not.toMatch(/^sluice_api_switch_failures_total\{endpoint="items"\} [1-9]/m);
    }
    durations.sort((a, b) => a - b);
    console.log(
      `host A switch (redirect → both api-servers serving): ${durations.map((d) => Math.round(d)).join(', ')} ms`,
    );
    // Prompt: well under any reconcile; the bench (`pnpm --filter @sluice/api-server bench:hosts`) measures the median.
    expect(durations[1]!).toBeLessThan(1_000);
  }, 90_000);
});
