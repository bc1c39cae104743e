/**
 * An owner killed an instant before a query: the query can reach the server before the server has processed the
 * dead owner's closed socket, so it is routed to the dead owner's subscription and nobody answers it. The server
 * drops that subscription moments later; "who runs X?" must then say `nobody` (the crash case stays fast), not
 * "alive but silent" (which makes a resubmit wait for the lease). The window is held open deterministically by a
 * TCP proxy in front of the owner that keeps the server's side of its connection open until the query was routed.
 */
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { freePort, spawnTs, startNatsServer } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { createNatsBackplane } from './nats-backplane.js';

const ownerFixture = fileURLToPath(new URL('../../test/fixtures/owner-process.ts', import.meta.url));

/**
 * A proxy to nats-server whose `hold()` makes the next client close stay unseen by the server: the server's side of
 * that connection stays open (as a server that has not yet processed a dead client's close) until `release()`.
 */
interface HoldingProxy extends AsyncDisposable {
  readonly url: string;
  hold(): void;
  /** Resolves once a held client has gone (its close is being held from the server). */
  readonly clientGone: Promise<void>;
  /** Resolves once the server wrote to a held connection (e.g. routed a query to the dead client's subscription). */
  readonly routedToHeld: Promise<void>;
  /** Closes the held connections: the server sees the client go now. */
  release(): void;
}

async function startHoldingProxy(targetPort: number): Promise<HoldingProxy> {
  const port = await freePort();
  const sockets = new Set<Socket>();
  const held = new Set<Socket>();
  let holding = false;
  let gone!: () => void;
  let routed!: () => void;
  const clientGone = new Promise<void>((resolve) => {
    gone = resolve;
  });
  const routedToHeld = new Promise<void>((resolve) => {
    routed = resolve;
  });
  const server: Server = createServer((client) => {
    const upstream = netConnect({ port: targetPort, host: '127.0.0.1' });
    sockets.add(client).add(upstream);
    client.on('error', () => undefined);
    upstream.on('error', () => undefined);
    // `end: false`: a client's FIN must not half-close the server's side while the close is held.
    client.pipe(upstream, { end: false });
    upstream.pipe(client);
    client.on('close', () => {
      if (!holding) {
        upstream.destroy();
        return;
      }
      upstream.unpipe(client);
      held.add(upstream);
      upstream.on('data', () => routed());
      upstream.resume(); // unpipe paused it
      gone();
    });
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const release = () => {
    for (const socket of held) socket.destroy();
    held.clear();
  };
  return {
    url: `nats://127.0.0.1:${port}`,
    hold: () => {
      holding = true;
    },
    clientGone,
    routedToHeld,
    release,
    async [Symbol.asyncDispose]() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('NATS backplane: an owner that died just before the query', () => {
  it('defect: an owner SIGKILLed just before a query, whose death the server noticed during the wait, was reported alive but silent', async () => {
    await using nats = await startNatsServer();
    await using proxy = await startHoldingProxy(nats.port);
    const clusterName = 'dead-owner';
    await using owner = spawnTs(ownerFixture, [proxy.url, clusterName, 'doomed', 't-dead', '0']);
    await owner.waitForLine(/^serving$/, 30_000);
    await using asker = await createNatsBackplane({ nats: nats.url, clusterName, nodeId: 'asker' });
    expect((await asker.whoRuns('t-dead', { timeoutMs: 2_000 })).status).toBe('owner');

    proxy.hold();
    await owner.stop('SIGKILL');
    await proxy.clientGone;
    const asking = asker.whoRuns('t-dead', { timeoutMs: 1_000 });
    // The server routed the query to the dead owner's subscription; only now does it see the owner's socket close.
    await proxy.routedToHeld;
    proxy.release();
    expect(await asking).toEqual({ status: 'nobody' });
  });
});
