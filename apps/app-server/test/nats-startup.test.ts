/**
 * An app-server started while its NATS server is not up yet (a compose file starting both, a rebooted host): it
 * waits for NATS (`backplane.connectWaitMs`) instead of exiting, and says so in its log.
 */
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { createTestDatabase, spawnTs, startNatsServer, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIN, call, startNodeProcess } from './helpers.js';

/**
 * Holds NATS's port while NATS is down, accepting and closing every connection (as a proxy in front of a server not
 * up yet would): a stopped server's port left free could be taken by another test's server meanwhile.
 */
async function holdPort(port: number): Promise<AsyncDisposable> {
  const server: Server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return { [Symbol.asyncDispose]: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

describe('NATS not up yet when the app-server starts', () => {
  it('defect: an app-server started a moment before its NATS server exited at once with BACKPLANE_UNAVAILABLE', {
    timeout: 120_000,
  }, async () => {
    await using db = await createTestDatabase('sluice_nats_startup');
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-nats-startup-');
    const spec = (nodeId: string, extraYaml = '') => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: db.url,
      nats: nats.url,
      roots: [dir.path],
      ...(extraYaml ? { extraYaml } : {}),
    });
    // A first start with NATS up writes the node's sluice.yaml; the node is then started again by hand from it.
    const first = await startNodeProcess(spec('w1'));
    await first[Symbol.asyncDispose]();
    const config = join(first.spec.dir, 'sluice.yaml');

    // Started with NATS down; NATS comes up once the node says it waits.
    await nats.stop();
    let hold = await holdPort(nats.port);
    await using node = spawnTs(BIN, ['--config', config], { cwd: first.spec.dir });
    // Before: "exited (1) before printing …; BACKPLANE_UNAVAILABLE: Cannot connect to NATS".
    await node.waitForLine(/NATS is not reachable yet; waiting for it/, 60_000);
    expect(node.child.exitCode).toBeNull();
    await hold[Symbol.asyncDispose]();
    await nats.start();
    await node.waitForLine(/app-server ready/, 60_000);
    const ready = await call(`http://127.0.0.1:${first.port}/readyz`);
    expect(ready.status, JSON.stringify(ready.body)).toBe(200);
    expect(await node.stop('SIGTERM', 20_000)).toEqual({ code: 0, signal: null });

    // Stopped (SIGTERM) while it waits: it gives up the wait and exits 0 at once, nothing having started.
    await nats.stop();
    hold = await holdPort(nats.port);
    const waiting = spawnTs(BIN, ['--config', config], { cwd: first.spec.dir });
    await waiting.waitForLine(/NATS is not reachable yet; waiting for it/, 60_000);
    expect(await waiting.stop('SIGTERM', 10_000)).toEqual({ code: 0, signal: null });
    expect(waiting.output()).toMatch(/stopped by SIGTERM before it had started/);

    // connectWaitMs 0: the old behaviour, for an operator who wants a supervisor to retry instead.
    const refused = await startNodeProcess(spec('w2', 'backplane: { connectWaitMs: 0 }')).then(
      () => null,
      (err: unknown) => (err as Error).message,
    );
    expect(refused).toMatch(/exited \(1\)/);
    expect(refused).toMatch(/BACKPLANE_UNAVAILABLE: Cannot connect to NATS: error connecting/);
    await hold[Symbol.asyncDispose]();
  });
});
