/**
 * An app-server started while its NATS server is not up yet (a compose file starting both, a rebooted host): it
 * waits for NATS (`backplane.connectWaitMs`) instead of exiting, and says so in its log.
 */
import { join } from 'node:path';
import { createTestDatabase, spawnTs, startNatsServer, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIN, call, startNodeProcess } from './helpers.js';

describe('NATS not up yet when the app-server starts', () => {
  it('defect: an app-server started a moment before its NATS server exited at once with BACKPLANE_UNAVAILABLE', {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_nats_startup');
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-nats-startup-');
    await nats.stop();
    const spec = (nodeId: string, extraYaml = '') => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: db.url,
      nats: nats.url,
      roots: [dir.path],
      ...(extraYaml ? { extraYaml } : {}),
    });
    // Started with NATS down; NATS comes up a few seconds later.
    const starting = startNodeProcess(spec('w1'));
    const started = starting.then(
      () => 'ready',
      (err: unknown) => `failed: ${(err as Error).message}`,
    );
    const first = await Promise.race([
      started,
      new Promise((resolve) => setTimeout(resolve, 3_000, 'waiting')),
    ]);
    // Before: "…exited (1) before printing /app-server ready/; … BACKPLANE_UNAVAILABLE: Cannot connect to NATS".
    expect(first).toBe('waiting');
    await nats.start();
    expect(await started).toBe('ready');
    await using node = await starting;
    expect(node.child.output()).toMatch(/NATS is not reachable yet; waiting for it/);
    const ready = await call(`${node.url}/readyz`);
    expect(ready.status).toBe(200);
    await node[Symbol.asyncDispose]();

    // Stopped (SIGTERM) while it waits: it gives up the wait and exits 0 at once, nothing having started.
    await nats.stop();
    const waiting = spawnTs(BIN, ['--config', join(node.spec.dir, 'sluice.yaml')], { cwd: node.spec.dir });
    await waiting.waitForLine(/NATS is not reachable yet; waiting for it/, 30_000);
    expect(await waiting.stop('SIGTERM', 10_000)).toEqual({ code: 0, signal: null });
    expect(waiting.output()).toMatch(/stopped by SIGTERM before it had started/);

    // connectWaitMs 0: the old behaviour, for an operator who wants a supervisor to retry instead.
    await nats.stop();
    const refused = await startNodeProcess(spec('w2', 'backplane: { connectWaitMs: 0 }')).then(
      () => null,
      (err: unknown) => (err as Error).message,
    );
    expect(refused).toMatch(/exited \(1\)/);
    expect(refused).toMatch(/BACKPLANE_UNAVAILABLE: Cannot connect to NATS: connection refused/);
  });
});
