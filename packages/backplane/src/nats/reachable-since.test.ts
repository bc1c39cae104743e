/**
 * `reachableSince`: whether this node's responders stayed reachable by its peers from an instant until now. An owner
 * skips a store round trip before an irreversible effect on the strength of it (the app-server's finishing shortcut),
 * so it must say no once the connection dropped — when a peer can hear "nobody" for a transfer this node still runs —
 * and keep saying no for any instant before a reconnect. Real nats-server, the owner's connection through a TCP proxy.
 */
import { startNatsServer, startTcpProxy, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { countingResponder } from '../../test/helpers.js';
import { createNatsBackplane } from './nats-backplane.js';

describe('NATS backplane: reachable since', () => {
  it('says no from the moment its connection drops, and for every instant before a reconnect', {
    timeout: 60_000,
  }, async () => {
    await using nats = await startNatsServer();
    await using proxy = await startTcpProxy(nats.port);
    const clusterName = 'reachable';
    await using owner = await createNatsBackplane({
      nats: proxy.url,
      clusterName,
      nodeId: 'owner',
      reconnect: { initialDelayMs: 20, maxDelayMs: 200 },
    });
    await using peer = await createNatsBackplane({ nats: nats.url, clusterName, nodeId: 'peer' });
    const report = { nodeId: 'owner', address: 'http://owner:7070', epoch: 1 };

    const servedAt = performance.now();
    await using _r = await owner.serve('t-1', countingResponder(report));
    expect(owner.reachableSince(servedAt)).toBe(true);
    expect(await peer.whoRuns('t-1', { timeoutMs: 2_000 })).toEqual({ status: 'owner', owner: report });

    await proxy.cut();
    // The server dropped the owner's subscription with its connection: the peer hears a definite "nobody" while the
    // owner still runs the transfer. From then on the owner must not count on its responder.
    await waitFor(async () => (await peer.whoRuns('t-1', { timeoutMs: 2_000 })).status === 'nobody', {
      timeoutMs: 10_000,
      what: 'the peer to hear nobody',
    });
    await waitFor(() => owner.status() === 'reconnecting', { what: 'the owner to notice the cut' });
    expect(owner.reachableSince(servedAt)).toBe(false);
    expect(owner.reachableSince(performance.now())).toBe(false);

    await proxy.restore();
    await waitFor(() => owner.status() === 'connected', {
      timeoutMs: 10_000,
      what: 'the owner to reconnect',
    });
    // Connected again, but a peer may have acted on the "nobody" it heard meanwhile.
    expect(owner.reachableSince(servedAt)).toBe(false);
    const reconnectedAt = performance.now();
    expect(owner.reachableSince(reconnectedAt)).toBe(true);

    await owner.close();
    expect(owner.reachableSince(reconnectedAt)).toBe(false);
  });
});
