/**
 * `backplane.strategy` is the host's choice for the api-servers as much as for the app-server: with a strategy other
 * than NATS the app-server publishes no alias event on NATS, so an api-server must watch the alias table even when
 * `nats` is configured (for JetStream sources, say) — not wait on a subscription nothing is published to.
 */
import { type NatsServerHandle, startNatsServer, type TempDir, tempDir, waitFor } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { answeringCache, startQuietApiServer, switchesOf, writeGeneration } from './helpers.js';

let nats: NatsServerHandle;
let dir: TempDir;

beforeAll(async () => {
  nats = await startNatsServer();
  dir = await tempDir('sluice-api-strategy-');
}, 60_000);

afterAll(async () => {
  await dir?.remove();
  await nats?.stop();
});

describe('backplane.strategy on the api-server', () => {
  it('defect: with nats set and backplane.strategy "single", the api-server listened on NATS and saw a switch only at api.reconcileMs', {
    timeout: 120_000,
  }, async () => {
    const first = await writeGeneration(dir.path, 1, 20);
    // A reconcile period far beyond the test: only watching the alias table can find the switch.
    await using server = await startQuietApiServer(dir.path, {
      nats: nats.url,
      backplane: { strategy: 'single' },
      api: { reconcileMs: 600_000 },
    });
    expect(await answeringCache(server.url)).toBe(first);
    // The app-server of a single-node host moves the alias without any NATS event (the writer publishes none).
    const second = await writeGeneration(dir.path, 2, 20);
    await waitFor(async () => (await answeringCache(server.url)) === second, {
      timeoutMs: 20_000,
      what: `the api-server to serve ${second}`,
    });
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    expect(switchesOf(metrics, 'items')).toBe(1);
    expect(metrics).toMatch(/sluice_api_switches_total\{endpoint="items",reason="watch"\} 1/);
    // Its readiness names no backplane it does not use.
    const ready = (await (await fetch(`${server.url}/readyz`)).json()) as Record<string, unknown>;
    expect(ready).toMatchObject({ status: 'ready', backplane: null });
  });
});
