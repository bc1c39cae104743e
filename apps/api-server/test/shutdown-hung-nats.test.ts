/**
 * An api-server stopped (SIGTERM, as a deploy or a rolling restart does) while its nats-server hangs (SIGSTOP — a
 * partition that drops packets without resets: the connection still counts as up, nothing asked of NATS is
 * answered). The api-server needs NATS for nothing it must finish: it stops gracefully, exit code 0, without waiting
 * for NATS to confirm that it unsubscribed.
 *
 * Real processes: the host's app-server, one api-server, a private nats-server paused before the SIGTERM.
 */
import { waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { answeringCache, startItemsHost } from './helpers.js';

describe('an api-server stopped while NATS hangs', () => {
  it('defect: SIGTERM while the nats-server hung ran into its shutdown limit and exited 1 instead of stopping with 0', {
    timeout: 90_000,
  }, async () => {
    await using host = await startItemsHost('sluice-api-hung-nats-stop-');
    const [api] = await host.startApiServers(1);
    await waitFor(async () => (await answeringCache(api!.url)) !== null, {
      timeoutMs: 30_000,
      what: 'the api-server to serve items',
    });

    host.nats.pause();
    try {
      // Before: "sluice-api-server: shutdown took longer than 16000 ms after SIGTERM, exiting" and exit code 1.
      const exit = await api!.child.stop('SIGTERM', 60_000);
      expect({ exit, stopped: /api-server stopped/.test(api!.child.output()) }, api!.child.output()).toEqual({
        exit: { code: 0, signal: null },
        stopped: true,
      });
    } finally {
      host.nats.resume();
    }
  });
});
