import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { BackplaneStatus, SluiceEvent } from '@sluice/core';
import { aliasRedirected, SluiceError, snapshottingDone } from '@sluice/core';
import {
  capturingLogger,
  type NatsServerHandle,
  spawnTs,
  startNatsServer,
  startTcpProxy,
  waitFor,
} from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countingResponder } from '../../test/helpers.js';
import type { NatsBackplaneOptions } from './backplane-options.js';
import { createNatsBackplane } from './nats-backplane.js';

const ownerFixture = fileURLToPath(new URL('../../test/fixtures/owner-process.ts', import.meta.url));

let nats: NatsServerHandle;
let cluster = 0;

beforeAll(async () => {
  nats = await startNatsServer();
});
afterAll(async () => {
  await nats?.[Symbol.asyncDispose]();
});

/** A fresh cluster name per test, so tests never see each other's subjects or buckets. */
function nextCluster(): string {
  cluster += 1;
  return `test.cluster-${cluster}`;
}

function node(clusterName: string, nodeId: string, extra: Partial<NatsBackplaneOptions> = {}) {
  return createNatsBackplane({ nats: nats.url, clusterName, nodeId, ...extra });
}

const report = (nodeId: string, epoch = 1) => ({
  nodeId,
  address: `http://${nodeId}.example:7070`,
  epoch,
  progress: { read: 10, written: 9 },
});

/** The `AliasRedirected` of alias `items` on host h1 to generation `items-<version>` (from the one before). */
function itemsRedirect(version: number) {
  return aliasRedirected({
    host: 'h1',
    alias: 'items',
    from: version === 1 ? null : `items-${version - 1}`,
    to: `items-${version}`,
    checkpoint: null,
    version,
  });
}

describe('NATS backplane: who runs a transfer', () => {
  it('three nodes: the owner is found with its id, address, epoch and progress', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a');
    await using b = await node(clusterName, 'b');
    await using c = await node(clusterName, 'c');
    await using _served = await b.serve('orders.2026:12-01', countingResponder(report('b', 3)));

    for (const asker of [a, c, b]) {
      const answer = await asker.whoRuns('orders.2026:12-01', { timeoutMs: 2_000 });
      expect(answer).toEqual({ status: 'owner', owner: report('b', 3) });
    }
    // Ids are encoded into subject tokens: a look-alike id does not reach the same subscription.
    expect(await a.whoRuns('orders.2026:12-02', { timeoutMs: 2_000 })).toEqual({ status: 'nobody' });
    expect(await a.whoRuns('orders', { timeoutMs: 2_000 })).toEqual({ status: 'nobody' });
  });

  it('nobody answers in well under the timeout (no responders)', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a');
    await using _b = await node(clusterName, 'b');
    const durations: number[] = [];
    for (let i = 0; i < 20; i++) {
      const started = performance.now();
      const answer = await a.whoRuns(`absent-${i}`, { timeoutMs: 5_000 });
      durations.push(performance.now() - started);
      expect(answer).toEqual({ status: 'nobody' });
    }
    durations.sort((x, y) => x - y);
    // The median is a millisecond or so; even the slowest is far from the 5 s timeout.
    expect(durations[10]!).toBeLessThan(50);
    expect(durations[19]!).toBeLessThan(500);
  });

  it('a slow owner in another process is waited for and found within the timeout', async () => {
    const clusterName = nextCluster();
    await using owner = spawnTs(ownerFixture, [nats.url, clusterName, 'slow', 'slow-transfer', '600']);
    await owner.waitForLine(/^serving$/, 30_000);
    await using a = await node(clusterName, 'a');

    const started = performance.now();
    const answer = await a.whoRuns('slow-transfer', { timeoutMs: 5_000 });
    const elapsed = performance.now() - started;
    expect(answer.status).toBe('owner');
    if (answer.status === 'owner') expect(answer.owner).toMatchObject({ nodeId: 'slow', epoch: 7 });
    expect(elapsed).toBeGreaterThanOrEqual(550);
    expect(elapsed).toBeLessThan(5_000);

    // With a wait shorter than the owner needs, the honest answer is "unknown", never "nobody" — but silent:
    // NATS is fine and the question reached a subscriber that did not answer in time (a caller may take over).
    const short = await a.whoRuns('slow-transfer', { timeoutMs: 150 });
    expect(short).toEqual({
      status: 'unknown',
      reason: 'the owner did not answer within 150 ms',
      silent: true,
    });
  });

  it('an owner that stops serving (closes, or its process is killed) is no longer reported', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a');
    await using b = await node(clusterName, 'b');
    const registration = await b.serve('t-close', countingResponder(report('b')));
    expect((await a.whoRuns('t-close', { timeoutMs: 2_000 })).status).toBe('owner');
    await registration.close();
    expect(await a.whoRuns('t-close', { timeoutMs: 2_000 })).toEqual({ status: 'nobody' });
    expect(await b.whoRuns('t-close', { timeoutMs: 2_000 })).toEqual({ status: 'nobody' });

    await using owner = spawnTs(ownerFixture, [nats.url, clusterName, 'doomed', 't-kill', '0']);
    await owner.waitForLine(/^serving$/, 30_000);
    expect((await a.whoRuns('t-kill', { timeoutMs: 2_000 })).status).toBe('owner');
    owner.kill('SIGKILL');
    await owner.exited;
    await waitFor(async () => (await a.whoRuns('t-kill', { timeoutMs: 2_000 })).status === 'nobody', {
      timeoutMs: 5_000,
      what: 'the killed owner to disappear',
    });
  });

  it('the owner answers as soon as serve() resolves', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a');
    await using b = await node(clusterName, 'b');
    for (let i = 0; i < 20; i++) {
      await using _r = await b.serve(`fresh-${i}`, countingResponder(report('b', i + 1)));
      // No wait between serve() and the query: this is the "record says IN_PROGRESS" moment.
      const answer = await a.whoRuns(`fresh-${i}`, { timeoutMs: 2_000 });
      expect(answer).toEqual({ status: 'owner', owner: report('b', i + 1) });
    }
  });

  it('serves and closes made at once each hold as soon as their own call resolves (they share pings)', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a');
    await using b = await node(clusterName, 'b');
    // Started a tick apart, so most find the ping of earlier ones in flight and wait for the next.
    const outcomes = await Promise.all(
      Array.from({ length: 60 }, async (_, i) => {
        for (let tick = 0; tick < i % 7; tick++) await new Promise((resolve) => setImmediate(resolve));
        const id = `burst-${i}`;
        const registration = await b.serve(id, countingResponder(report('b', i + 1)));
        const served = await a.whoRuns(id, { timeoutMs: 2_000 });
        await registration.close();
        const closed = await a.whoRuns(id, { timeoutMs: 2_000 });
        return { served, closed, i };
      }),
    );
    for (const { served, closed, i } of outcomes) {
      expect(served).toEqual({ status: 'owner', owner: report('b', i + 1) });
      expect(closed).toEqual({ status: 'nobody' });
    }
  });

  it('rejects bad input with typed errors and writes nothing', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a');
    const bad = ['', 'has space', 'a*b', 'x'.repeat(201), 'a>b'];
    for (const id of bad) {
      await expect(a.whoRuns(id, { timeoutMs: 100 })).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
      await expect(a.serve(id, countingResponder(report('a')))).rejects.toMatchObject({
        code: 'VALIDATION_FAILED',
      });
    }
    await expect(a.whoRuns('ok', { timeoutMs: 0 })).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
    await expect(
      a.publish({ type: 'AliasRedirected', alias: '' } as unknown as SluiceEvent),
    ).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
    await using _r = await a.serve('dup', countingResponder(report('a')));
    await expect(a.serve('dup', countingResponder(report('a')))).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
    expect(await a.latestAliasEvents()).toEqual([]);
  });
});

describe('NATS backplane: owners answering on their instance subject (instanceId)', () => {
  it('one subscription answers for all its transfers: found by its instance, nobody when it does not run it or is gone, unknown without an instance', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a', { instanceId: 'a-1' });
    const b = await node(clusterName, 'b', { instanceId: 'b-1' });
    const ask = (id: string, ownerInstance?: string) => a.whoRuns(id, { timeoutMs: 2_000, ownerInstance });
    const served = await Promise.all(
      Array.from({ length: 20 }, (_, i) => b.serve(`inst-${i}`, countingResponder(report('b', i + 1)))),
    );
    // No wait between serve() and the query: this is the "record says IN_PROGRESS" moment.
    for (let i = 0; i < 20; i++)
      expect(await ask(`inst-${i}`, 'b-1')).toEqual({ status: 'owner', owner: report('b', i + 1) });
    expect(await ask('inst-absent', 'b-1')).toEqual({ status: 'nobody' });
    expect(await ask('inst-0', 'b-gone')).toEqual({ status: 'nobody' });
    // Owners answer on their instance's subject only: without it, "no responders" would be a false nobody.
    expect(await ask('inst-0')).toMatchObject({ status: 'unknown' });
    await served[0]!.close();
    expect(await ask('inst-0', 'b-1')).toEqual({ status: 'nobody' });
    expect(await ask('inst-1', 'b-1')).toMatchObject({ status: 'owner' });
    await b.close();
    expect(await ask('inst-1', 'b-1')).toEqual({ status: 'nobody' });
    await expect(node(clusterName, 'c', { instanceId: '' })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
    });
  });

  it('two live instances of one node id (a rolling restart) are each asked on their own subject', async () => {
    const clusterName = nextCluster();
    await using asker = await node(clusterName, 'asker', { instanceId: 'asker-1' });
    await using old = await node(clusterName, 'b', { instanceId: 'b-old' });
    await using fresh = await node(clusterName, 'b', { instanceId: 'b-new' });
    await using _s = await old.serve('t-rolling', countingResponder(report('b', 3)));
    for (let i = 0; i < 20; i++) {
      // The new instance does not run it: its "not running" must never answer for the old one.
      expect(await asker.whoRuns('t-rolling', { timeoutMs: 2_000, ownerInstance: 'b-old' })).toEqual({
        status: 'owner',
        owner: report('b', 3),
      });
      expect(await asker.whoRuns('t-rolling', { timeoutMs: 2_000, ownerInstance: 'b-new' })).toEqual({
        status: 'nobody',
      });
    }
    expect(fresh.nodeId).toBe('b');
  });

  it('terminate reaches the instance that runs it once, after it stopped; another instance says not running', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a', { instanceId: 'a-1' });
    await using b = await node(clusterName, 'b', { instanceId: 'b-1' });
    const responder = countingResponder(report('b'), { stopMs: 100 });
    await using _r = await b.serve('t-stop', responder);
    const answers = await Promise.all([
      a.terminate('t-stop', { timeoutMs: 5_000, ownerInstance: 'b-1' }),
      a.terminate('t-stop', { timeoutMs: 5_000, ownerInstance: 'b-1' }),
    ]);
    expect(answers).toEqual([
      { status: 'terminated', by: 'b' },
      { status: 'terminated', by: 'b' },
    ]);
    expect(responder.terminations).toBe(1);
    expect(await a.terminate('t-other', { timeoutMs: 5_000, ownerInstance: 'b-1' })).toEqual({
      status: 'not-running',
    });
    expect(await a.terminate('t-stop', { timeoutMs: 5_000, ownerInstance: 'b-gone' })).toEqual({
      status: 'not-running',
    });
    expect(await a.terminate('t-stop', { timeoutMs: 5_000 })).toMatchObject({ status: 'unknown' });
  });

  it('a malformed query on an instance subject is answered with an error, logged, and changes nothing', async () => {
    const clusterName = nextCluster();
    const logger = capturingLogger();
    await using b = await node(clusterName, 'b', { instanceId: 'b-1', logger });
    await using _r = await b.serve('t-kept', countingResponder(report('b')));
    const raw = await connect({ servers: nats.url });
    try {
      const reply = await raw.request(b.subjects.instance('b-1', 'owner'), '{"id": "has space"}', {
        timeout: 2_000,
      });
      expect(JSON.parse(reply.string())).toMatchObject({ ok: false });
      expect(logger.warnings().map((entry) => entry.msg)).toContain('backplane dropped a malformed message');
    } finally {
      await raw.close();
    }
    await using a = await node(clusterName, 'a', { instanceId: 'a-1' });
    expect(await a.whoRuns('t-kept', { timeoutMs: 2_000, ownerInstance: 'b-1' })).toMatchObject({
      status: 'owner',
    });
  });
});

describe('NATS backplane: terminate', () => {
  it('reaches the owner exactly once and is acknowledged after it stopped', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a');
    await using b = await node(clusterName, 'b');
    await using c = await node(clusterName, 'c');
    const responder = countingResponder(report('b'), { stopMs: 200 });
    await using _r = await b.serve('t-term', responder);

    const started = performance.now();
    const answers = await Promise.all([
      a.terminate('t-term', { timeoutMs: 5_000 }),
      c.terminate('t-term', { timeoutMs: 5_000 }),
      a.terminate('t-term', { timeoutMs: 5_000 }),
    ]);
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    for (const answer of answers) expect(answer).toEqual({ status: 'terminated', by: 'b' });
    // A repeat is acknowledged without stopping the work a second time.
    expect(await c.terminate('t-term', { timeoutMs: 5_000 })).toEqual({ status: 'terminated', by: 'b' });
    expect(responder.terminations).toBe(1);

    expect(await a.terminate('t-nobody', { timeoutMs: 5_000 })).toEqual({ status: 'not-running' });
  });

  it('reaches an owner in another process', async () => {
    const clusterName = nextCluster();
    await using owner = spawnTs(ownerFixture, [nats.url, clusterName, 'remote', 't-remote', '0']);
    await owner.waitForLine(/^serving$/, 30_000);
    await using a = await node(clusterName, 'a');
    expect(await a.terminate('t-remote', { timeoutMs: 5_000 })).toEqual({
      status: 'terminated',
      by: 'remote',
    });
    await owner.waitForLine(/^terminated$/, 5_000);
    expect(owner.lines.filter((line) => line === 'terminated')).toHaveLength(1);
  });
});

describe('NATS backplane: events', () => {
  it('every subscriber gets each AliasRedirected, in order; a type filter is honoured', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a');
    await using b = await node(clusterName, 'b');
    await using c = await node(clusterName, 'c');
    const seen = {
      a: [] as SluiceEvent[],
      b: [] as SluiceEvent[],
      c: [] as SluiceEvent[],
      snap: [] as SluiceEvent[],
    };
    await using _sa = await a.subscribe((e) => void seen.a.push(e));
    await using _sb = await b.subscribe((e) => void seen.b.push(e), { types: ['AliasRedirected'] });
    await using _sc = await c.subscribe(async (e) => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      seen.c.push(e);
    });
    await using _ss = await c.subscribe((e) => void seen.snap.push(e), { types: ['SnapshottingDone'] });

    const redirects = Array.from({ length: 5 }, (_, i) =>
      aliasRedirected({
        host: 'h1',
        alias: 'items',
        from: `items-${i}`,
        to: `items-${i + 1}`,
        checkpoint: null,
        version: i + 1,
      }),
    );
    const done = snapshottingDone({ endpoint: 'items', cache: 'items-5', source: 'file' });
    for (const event of redirects) await a.publish(event);
    await b.publish(done);

    await waitFor(
      () => seen.a.length === 6 && seen.b.length === 5 && seen.c.length === 6 && seen.snap.length === 1,
      {
        what: 'all subscribers to receive every event',
      },
    );
    expect(seen.a).toEqual([...redirects, done]);
    expect(seen.b).toEqual(redirects);
    expect(seen.c).toEqual([...redirects, done]);
    expect(seen.snap).toEqual([done]);
  });

  it('keeps the latest AliasRedirected per alias in KV for processes that connect late, never an older one', async () => {
    const clusterName = nextCluster();
    await using a = await node(clusterName, 'a');
    const v1 = itemsRedirect(1);
    const v3 = itemsRedirect(3);
    const v2 = itemsRedirect(2);
    const other = aliasRedirected({
      host: 'h1',
      alias: 'users/eu.west',
      from: null,
      to: 'users-1',
      checkpoint: null,
      version: 1,
    });
    await a.publish(v1);
    await a.publish(v3);
    await a.publish(v2); // late, out of order: must not replace v3
    await a.publish(other);

    await using late = await node(clusterName, 'late');
    expect(await late.latestAliasEvents()).toEqual([v3, other]);
    expect(late.kvBucket).toBe(a.kvBucket);
  });

  it('a subscriber cut off while a redirect was published sees the latest state after reconnecting', async () => {
    const clusterName = nextCluster();
    await using proxy = await startTcpProxy(nats.port);
    await using publisher = await node(clusterName, 'publisher');
    await using subscriber = await createNatsBackplane({
      nats: proxy.url,
      clusterName,
      nodeId: 'subscriber',
      reconnect: { initialDelayMs: 20, maxDelayMs: 200 },
    });
    const seen: SluiceEvent[] = [];
    await using _s = await subscriber.subscribe((e) => void seen.push(e));
    const statuses: BackplaneStatus[] = [];
    subscriber.onStatus((s) => statuses.push(s));

    const v1 = itemsRedirect(1);
    await publisher.publish(v1);
    await waitFor(() => seen.length === 1, { what: 'the first redirect' });

    await proxy.cut();
    await waitFor(() => subscriber.status() === 'reconnecting', { what: 'the subscriber to notice the cut' });
    const v2 = itemsRedirect(2);
    const v3 = itemsRedirect(3);
    await publisher.publish(v2);
    await publisher.publish(v3);
    expect(seen).toEqual([v1]);

    await proxy.restore();
    await waitFor(() => seen.length >= 2, { timeoutMs: 10_000, what: 'the missed state after reconnecting' });
    // The latest state, once; the intermediate v2 is history and v1 is not repeated.
    expect(seen).toEqual([v1, v3]);
    expect(statuses).toEqual(['reconnecting', 'connected']);
    expect(await subscriber.latestAliasEvents()).toEqual([v3]);
  });
});

describe('NATS backplane: garbage on the subjects', () => {
  it('drops and logs malformed messages and keeps working', async () => {
    const clusterName = nextCluster();
    const logger = capturingLogger();
    await using a = await node(clusterName, 'a', { logger });
    await using b = await node(clusterName, 'b');
    const seen: SluiceEvent[] = [];
    await using _s = await a.subscribe((e) => void seen.push(e));
    await using _r = await a.serve('t-g', countingResponder(report('a')));
    const raw: NatsConnection = await connect({ servers: nats.url });
    try {
      const prefix = a.subjects.prefix;
      raw.publish(`${prefix}.ev.AliasRedirected`, 'not json {');
      raw.publish(`${prefix}.ev.AliasRedirected`, JSON.stringify({ type: 'AliasRedirected', alias: 42 }));
      raw.publish(`${prefix}.ev.Bogus`, JSON.stringify({ type: 'Bogus' }));
      raw.publish(
        `${prefix}.ev.SnapshottingDone`,
        JSON.stringify(aliasRedirected({ host: 'h1', alias: 'x', from: null, to: 'y', checkpoint: null })),
      );
      raw.publish(`${prefix}.ev.AliasRedirected`, 'x'.repeat(70_000));
      raw.publish(`${prefix}.ev.AliasRedirected`, new Uint8Array([0xff, 0xfe, 0x00]));
      raw.publish(a.subjects.owner('t-g'), 'no reply subject');
      await expect(raw.request(`${prefix}.xfer.t-g.explode`, 'x', { timeout: 300 })).rejects.toThrow();
      await raw.flush();

      // A fake "owner" replying garbage makes the answer unknown, never a crash or a wrong owner.
      const fake = raw.subscribe(b.subjects.owner('t-fake'), {
        callback: (_e, msg) => {
          msg.respond('{"ok":true}');
        },
      });
      await raw.flush();
      const answer = await b.whoRuns('t-fake', { timeoutMs: 1_000 });
      expect(answer.status).toBe('unknown');
      fake.unsubscribe();

      const valid = itemsRedirect(1);
      await b.publish(valid);
      await waitFor(() => seen.length === 1, { what: 'the valid event after the garbage' });
      expect(seen).toEqual([valid]);
      expect((await b.whoRuns('t-g', { timeoutMs: 1_000 })).status).toBe('owner');
      await waitFor(() => logger.warnings().length >= 8, { what: 'every malformed message to be logged' });
      const reasons = logger
        .warnings()
        .map((w) => String(w.fields.reason ?? ''))
        .join('\n');
      expect(reasons).toMatch(/not JSON/);
      expect(reasons).toMatch(/schema/);
      expect(reasons).toMatch(/exceeds/);
      expect(reasons).toMatch(/wrong subject/);
      expect(reasons).toMatch(/unknown action/);
      expect(reasons).toMatch(/without a reply subject/);
    } finally {
      await raw.close();
    }
  });
});

describe('NATS backplane: outages', () => {
  it('NATS killed: unknown, never nobody; restarted: owners and subscriptions are back without any call', async () => {
    await using server = await startNatsServer();
    const clusterName = nextCluster();
    const options = { reconnect: { initialDelayMs: 20, maxDelayMs: 200 }, reconnectSettleMs: 3_000 };
    await using a = await createNatsBackplane({ nats: server.url, clusterName, nodeId: 'a', ...options });
    await using b = await createNatsBackplane({ nats: server.url, clusterName, nodeId: 'b', ...options });
    const responder = countingResponder(report('b'));
    await using _r = await b.serve('t-outage', responder);
    const seen: SluiceEvent[] = [];
    await using _s = await a.subscribe((e) => void seen.push(e));
    const statuses: BackplaneStatus[] = [];
    a.onStatus((s) => statuses.push(s));

    expect((await a.whoRuns('t-outage', { timeoutMs: 1_000 })).status).toBe('owner');
    await server.kill();
    await waitFor(() => a.status() === 'reconnecting' && b.status() === 'reconnecting', {
      what: 'both nodes to notice the outage',
    });

    for (const id of ['t-outage', 't-never-served']) {
      const started = performance.now();
      const answer = await a.whoRuns(id, { timeoutMs: 1_000 });
      // An outage is never silent: nobody may take over on it.
      expect(answer).toEqual({ status: 'unknown', reason: expect.stringMatching(/^NATS is /) });
      expect(performance.now() - started).toBeLessThan(100);
      expect(await a.terminate(id, { timeoutMs: 1_000 })).toEqual({
        status: 'unknown',
        reason: expect.stringMatching(/^NATS is /),
      });
    }
    const event = aliasRedirected({
      host: 'h1',
      alias: 'items',
      from: null,
      to: 'items-9',
      checkpoint: null,
      version: 9,
    });
    await expect(a.publish(event)).rejects.toSatisfy((err) =>
      SluiceError.hasCode(err, 'BACKPLANE_UNAVAILABLE'),
    );
    await expect(a.latestAliasEvents()).rejects.toSatisfy((err) =>
      SluiceError.hasCode(err, 'BACKPLANE_UNAVAILABLE'),
    );

    // A transfer started during the outage registers now and answers once NATS is back.
    await using _during = await b.serve('t-during', countingResponder(report('b', 2)));

    await server.start();
    await waitFor(() => a.status() === 'connected' && b.status() === 'connected', {
      timeoutMs: 10_000,
      what: 'both nodes to reconnect',
    });
    // Right after a reconnect a "no responders" may only mean an owner is not back yet: unknown, not nobody.
    const settling = await a.whoRuns('t-never-served', { timeoutMs: 1_000 });
    expect(settling.status).toBe('unknown');
    await waitFor(async () => (await a.whoRuns('t-outage', { timeoutMs: 1_000 })).status === 'owner', {
      what: 'the owner to answer again',
    });
    await waitFor(async () => (await a.whoRuns('t-never-served', { timeoutMs: 1_000 })).status === 'nobody', {
      what: 'nobody to be certain again after settling',
    });
    expect(await a.whoRuns('t-during', { timeoutMs: 1_000 })).toEqual({
      status: 'owner',
      owner: report('b', 2),
    });
    await b.publish(event);
    await waitFor(() => seen.length === 1, { what: 'the restored event subscription to deliver' });
    expect(seen).toEqual([event]);
    expect(await a.terminate('t-outage', { timeoutMs: 2_000 })).toEqual({ status: 'terminated', by: 'b' });
    expect(responder.terminations).toBe(1);
    expect(statuses).toEqual(['reconnecting', 'connected']);
  });

  it('close() drains: status closed, later calls fail or answer unknown', async () => {
    const clusterName = nextCluster();
    const a = await node(clusterName, 'a');
    await using b = await node(clusterName, 'b');
    const statuses: BackplaneStatus[] = [];
    a.onStatus((s) => statuses.push(s));
    await a.serve('t-drain', countingResponder(report('a')));
    const publishing = a.publish(snapshottingDone({ endpoint: 'e', cache: 'c', source: 's' }));
    await a.close();
    await publishing;
    await a.close();
    expect(a.status()).toBe('closed');
    expect(statuses).toEqual(['closed']);
    expect(await b.whoRuns('t-drain', { timeoutMs: 1_000 })).toEqual({ status: 'nobody' });
    expect((await a.whoRuns('t-drain', { timeoutMs: 1_000 })).status).toBe('unknown');
    await expect(a.serve('t-x', countingResponder(report('a')))).rejects.toMatchObject({
      code: 'BACKPLANE_UNAVAILABLE',
    });
  });

  it('fails fast with BACKPLANE_UNAVAILABLE when NATS cannot be reached at all', async () => {
    await using server = await startNatsServer({ jetstream: false });
    const url = server.url;
    await server.stop();
    await expect(createNatsBackplane({ nats: url, clusterName: 'c', nodeId: 'n' })).rejects.toMatchObject({
      code: 'BACKPLANE_UNAVAILABLE',
    });
  });
});

describe('defect 7: alias events of different hosts collide', () => {
  it("versions count per host: one host's counter ahead never drops another host's redirect, in events or KV", async () => {
    const clusterName = nextCluster();
    await using publisher = await node(clusterName, 'publisher');
    await using all = await node(clusterName, 'all');
    await using onlyA = await node(clusterName, 'only-a', { aliasHost: 'host-a' });
    const heardAll: SluiceEvent[] = [];
    const heardA: SluiceEvent[] = [];
    await using _all = await all.subscribe((e) => void heardAll.push(e), { types: ['AliasRedirected'] });
    await using _a = await onlyA.subscribe((e) => void heardA.push(e), { types: ['AliasRedirected'] });

    const onB = [5, 6, 7].map((version) =>
      aliasRedirected({
        host: 'host-b',
        alias: 'items',
        from: null,
        to: `b-${version}`,
        checkpoint: null,
        version,
      }),
    );
    for (const event of onB) await publisher.publish(event);
    const onA = aliasRedirected({
      host: 'host-a',
      alias: 'items',
      from: null,
      to: 'a-2',
      checkpoint: null,
      version: 2,
    });
    await publisher.publish(onA);

    await waitFor(() => heardA.length === 1 && heardAll.length === 4, {
      timeoutMs: 5_000,
      what: 'the events',
    });
    expect(heardA).toEqual([onA]);
    expect(heardAll).toEqual([...onB, onA]);
    // KV keeps one latest entry per host and alias; an api-server of host A lists only its own.
    expect(await all.latestAliasEvents()).toEqual([onA, onB[2]]);
    expect(await onlyA.latestAliasEvents()).toEqual([onA]);
    await using late = await node(clusterName, 'late-a', { aliasHost: 'host-a' });
    expect(await late.latestAliasEvents()).toEqual([onA]);
  });

  it('alias events travel on per-host subjects', async () => {
    const clusterName = nextCluster();
    await using publisher = await node(clusterName, 'publisher');
    const raw = await connect({ servers: nats.url });
    try {
      const subjects: string[] = [];
      const sub = raw.subscribe(`${publisher.subjects.prefix}.ev.>`, {
        callback: (_err, msg) => void subjects.push(msg.subject),
      });
      await raw.flush();
      await publisher.publish(
        aliasRedirected({ host: 'h.1', alias: 'items', from: null, to: 'x', checkpoint: null, version: 1 }),
      );
      await waitFor(() => subjects.length === 1, { timeoutMs: 5_000, what: 'the event' });
      expect(subjects).toEqual([publisher.subjects.aliasEvents('h.1')]);
      expect(subjects[0]).toBe(`${publisher.subjects.prefix}.ev.AliasRedirected.h~2E1`);
      sub.unsubscribe();
    } finally {
      await raw.close();
    }
  });
});

/** The pid of the nats-server listening on `port` (to pause it with SIGSTOP). */
async function natsServerPid(port: number): Promise<number> {
  const { readdir, readFile } = await import('node:fs/promises');
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const args = cmdline.split('\0');
    if (args[0]?.endsWith('nats-server') && args[args.indexOf('-p') + 1] === String(port))
      return Number(entry);
  }
  throw new Error(`no nats-server on port ${port}`);
}

describe('defect 5: a live owner can be taken over on a false "nobody"', () => {
  it('a paused nats-server makes an owner query unknown and not silent (the owner may be fine); once it resumes the owner answers again and a settled no-responders is nobody', async () => {
    await using paused = await startNatsServer();
    const pid = await natsServerPid(paused.port);
    const clusterName = nextCluster();
    const options = { nats: paused.url, clusterName, reconnectSettleMs: 1_000 };
    await using owner = await createNatsBackplane({ ...options, nodeId: 'owner' });
    await using asker = await createNatsBackplane({ ...options, nodeId: 'asker' });
    await using _served = await owner.serve('t-live', countingResponder(report('owner')));
    expect(await asker.whoRuns('t-live', { timeoutMs: 2_000 })).toEqual({
      status: 'owner',
      owner: report('owner'),
    });

    process.kill(pid, 'SIGSTOP');
    // The signal is delivered asynchronously: ask only once the kernel reports the server stopped.
    await waitFor(async () => (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]?.startsWith('T'), {
      timeoutMs: 5_000,
      intervalMs: 5,
      what: 'nats-server to be stopped',
    });
    let answer: Awaited<ReturnType<typeof asker.whoRuns>>;
    let terminate: Awaited<ReturnType<typeof asker.terminate>>;
    try {
      answer = await asker.whoRuns('t-live', { timeoutMs: 300 });
      terminate = await asker.terminate('t-live', { timeoutMs: 300 });
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    // Not `silent`: a silent answer lets the caller take over a live owner whose only fault is a paused server.
    expect(answer).toMatchObject({ status: 'unknown' });
    expect('silent' in answer).toBe(false);
    expect(terminate).toMatchObject({ status: 'unknown' });
    expect('silent' in terminate).toBe(false);

    // The server is back and the owner answers again. Right after the stall, "no responders" proves nothing (other
    // nodes' connections may have gone stale in the pause and be reconnecting); once settled, it is a fast nobody.
    expect(await asker.whoRuns('t-live', { timeoutMs: 2_000 })).toEqual({
      status: 'owner',
      owner: report('owner'),
    });
    expect((await asker.whoRuns('t-gone', { timeoutMs: 2_000 })).status).toBe('unknown');
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const started = performance.now();
    expect(await asker.whoRuns('t-gone', { timeoutMs: 2_000 })).toEqual({ status: 'nobody' });
    expect(performance.now() - started).toBeLessThan(100);
  });

  it('no responders while the asker is reconnecting, or just reconnected, is unknown; settled, it is nobody at once', async () => {
    await using restarting = await startNatsServer();
    const clusterName = nextCluster();
    const options = { nats: restarting.url, clusterName, reconnectSettleMs: 1_500 };
    await using owner = await createNatsBackplane({ ...options, nodeId: 'owner' });
    await using asker = await createNatsBackplane({ ...options, nodeId: 'asker' });
    await using _served = await owner.serve('t-live', countingResponder(report('owner')));

    await restarting.restart();
    await waitFor(() => asker.status() === 'connected', {
      timeoutMs: 10_000,
      what: 'the asker to reconnect',
    });
    // Reconnected, settle window open: whatever the owner's state, "no responders" proves nothing yet.
    const early = await asker.whoRuns('t-absent', { timeoutMs: 2_000 });
    expect(early.status).toBe('unknown');
    await new Promise((resolve) => setTimeout(resolve, 1_600));
    const started = performance.now();
    expect(await asker.whoRuns('t-absent', { timeoutMs: 2_000 })).toEqual({ status: 'nobody' });
    expect(performance.now() - started).toBeLessThan(100);
    expect(await asker.whoRuns('t-live', { timeoutMs: 2_000 })).toEqual({
      status: 'owner',
      owner: report('owner'),
    });
  });
});
