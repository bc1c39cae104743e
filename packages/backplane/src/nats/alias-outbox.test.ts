/**
 * Alias redirects a NATS backplane could not publish (the connection was down or reconnecting) are kept — the
 * latest per host and alias — and published once NATS is back: subscribers hear them and the KV bucket holds them
 * for late processes. Real nats-server processes, killed and started again on the same port and store.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import type { AliasRedirected, SluiceEvent } from '@sluice/core';
import { aliasRedirected } from '@sluice/core';
import { capturingLogger, startNatsServer, startTcpProxy, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { createNatsBackplane } from './nats-backplane.js';

/** Reconnect quickly: the tests wait for reconnects. */
const FAST = { reconnect: { initialDelayMs: 20, maxDelayMs: 200 } };

/** The redirect of `alias` on host h1 to `<alias>-<version>` (from the generation before). */
function redirect(alias: string, version: number): AliasRedirected {
  return aliasRedirected({
    host: 'h1',
    alias,
    from: version === 1 ? null : `${alias}-${version - 1}`,
    to: `${alias}-${version}`,
    checkpoint: null,
    version,
  });
}

/** The redirects of `alias` among `events`, in the order heard. */
function ofAlias(events: SluiceEvent[], alias: string): SluiceEvent[] {
  return events.filter((e) => e.type === 'AliasRedirected' && e.alias === alias);
}

describe('NATS backplane: alias redirects published during an outage', () => {
  it('defect: a redirect published while NATS was reconnecting never reached subscribers or the kept alias state', async () => {
    await using server = await startNatsServer();
    const options = { nats: server.url, clusterName: 'outbox', ...FAST };
    await using publisher = await createNatsBackplane({ ...options, nodeId: 'app-server' });
    await using listener = await createNatsBackplane({ ...options, nodeId: 'api-server' });
    const heard: SluiceEvent[] = [];
    await using _s = await listener.subscribe((e) => void heard.push(e), { types: ['AliasRedirected'] });
    const items1 = redirect('items', 1);
    await publisher.publish(items1);
    await waitFor(() => heard.length === 1, { what: 'the first redirect' });

    await server.kill();
    await waitFor(() => publisher.status() === 'reconnecting', {
      what: 'the publisher to notice the outage',
    });
    // The switches go on while NATS is down: each publish fails at once (nothing waits for NATS) and says the
    // redirect is kept. items-2 is superseded by items-3 before NATS is back: only the latest state is owed.
    const items2 = redirect('items', 2);
    const items3 = redirect('items', 3);
    const users1 = redirect('users', 1);
    const refusals: unknown[] = [];
    for (const event of [items2, items3, users1])
      await publisher.publish(event).catch((err) => refusals.push(err));

    await server.start();
    await waitFor(() => heard.length >= 3, {
      timeoutMs: 15_000,
      what: 'the kept redirects to be published once NATS is back',
    });
    // Each alias in order, its latest state once (the listener may hear one alias live and the other from the
    // bucket after its own reconnect, so the two aliases' order between them is not fixed).
    expect(ofAlias(heard, 'items')).toEqual([items1, items3]);
    expect(ofAlias(heard, 'users')).toEqual([users1]);
    expect(refusals).toEqual(
      [items2, items3, users1].map((event) =>
        expect.objectContaining({
          code: 'BACKPLANE_UNAVAILABLE',
          details: { deferred: true, alias: event.alias, to: event.to },
        }),
      ),
    );
    // A process that starts now reads the same state from the bucket.
    await using late = await createNatsBackplane({ ...options, nodeId: 'late' });
    expect(await late.latestAliasEvents()).toEqual([items3, users1]);
    // Published once: nothing is repeated later.
    const next = redirect('items', 4);
    await publisher.publish(next);
    await waitFor(() => heard.length === 4, { what: 'the next redirect' });
    expect(ofAlias(heard, 'items')).toEqual([items1, items3, next]);
  });

  it('defect: a subscriber whose read of the alias bucket failed after its reconnect never heard the redirects published while it was cut off', async () => {
    // Two users: the publisher's, and the subscriber's — whose JetStream access the test takes away for a while
    // (as a JetStream not yet ready after a restart would refuse it), reloading the server's configuration.
    await using dir = await tempDir();
    const config = join(dir.path, 'nats.conf');
    // JetStream is set in the file, not by flags: a reload applies the file's settings, JetStream's included.
    const users = (subscriberMayUseJetStream: boolean) =>
      `jetstream { store_dir: "${join(dir.path, 'jetstream')}" }
      authorization { users: [
        { user: pub, password: pub-secret }
        { user: sub, password: sub-secret${subscriberMayUseJetStream ? '' : ', permissions: { publish: { deny: ["$JS.API.>"] } }'} }
      ] }\n`;
    await writeFile(config, users(true));
    await using server = await startNatsServer({ jetstream: false, args: ['-c', config] });
    // The subscriber reaches NATS through a proxy the test cuts: the publisher carries on meanwhile.
    await using proxy = await startTcpProxy(server.port);
    const common = { clusterName: 'replay', ...FAST };
    await using publisher = await createNatsBackplane({
      ...common,
      nats: { servers: server.url, user: 'pub', pass: 'pub-secret' },
      nodeId: 'app-server',
    });
    const logger = capturingLogger();
    await using listener = await createNatsBackplane({
      ...common,
      nats: { servers: proxy.url, user: 'sub', pass: 'sub-secret' },
      nodeId: 'api-server',
      logger,
    });
    const heard: SluiceEvent[] = [];
    await using _s = await listener.subscribe((e) => void heard.push(e), { types: ['AliasRedirected'] });
    const items1 = redirect('items', 1);
    await publisher.publish(items1);
    await waitFor(() => heard.length === 1, { what: 'the first redirect' });

    await proxy.cut();
    await waitFor(() => listener.status() === 'reconnecting', { what: 'the subscriber to notice the cut' });
    // Published and stored while the subscriber cannot hear it: it is owed from the bucket after its reconnect.
    const items2 = redirect('items', 2);
    await publisher.publish(items2);

    await writeFile(config, users(false));
    await server.reload();
    await proxy.restore();
    const failedReads = () =>
      logger.warnings().filter((e) => e.msg === 'could not read the alias bucket after reconnecting').length;
    await waitFor(() => failedReads() > 0, {
      timeoutMs: 15_000,
      what: 'the subscriber to reconnect and fail to read the bucket',
    });
    expect(listener.status()).toBe('connected');
    expect(heard).toEqual([items1]);

    // JetStream answers it again: the redirect it missed reaches it without another reconnect or publish.
    await writeFile(config, users(true));
    await server.reload();
    await waitFor(() => heard.length === 2, {
      timeoutMs: 15_000,
      what: 'the missed redirect once the bucket can be read',
    });
    expect(heard).toEqual([items1, items2]);
  });

  it('a redirect whose alias state the bucket refused is kept and stored by a retry once the bucket takes it', async () => {
    await using server = await startNatsServer();
    const bucket = 'sluice-aliases-refusing';
    const admin = await connect({ servers: server.url });
    try {
      // An operator's bucket whose values are too small for any redirect: every write is refused.
      await new Kvm(admin).create(bucket, { history: 1, maxValueSize: 16 });
      const options = { nats: server.url, clusterName: 'refusing', kvBucket: bucket, ...FAST };
      await using publisher = await createNatsBackplane({ ...options, nodeId: 'app-server' });
      await using reader = await createNatsBackplane({ ...options, nodeId: 'late' });
      const event = redirect('items', 1);
      await expect(publisher.publish(event)).rejects.toMatchObject({
        code: 'BACKPLANE_UNAVAILABLE',
        details: { deferred: true, alias: 'items', to: 'items-1' },
      });
      expect(await reader.latestAliasEvents()).toEqual([]);

      // The operator lifts the limit: the kept redirect is stored by the outbox's retry, with no call from anyone.
      const jsm = await jetstreamManager(admin);
      await jsm.streams.update(`KV_${bucket}`, { max_msg_size: -1 });
      await waitFor(async () => (await reader.latestAliasEvents()).length > 0, {
        timeoutMs: 15_000,
        what: 'the kept redirect to be stored once the bucket takes it',
      });
      expect(await reader.latestAliasEvents()).toEqual([event]);
    } finally {
      await admin.close();
    }
  });
});
