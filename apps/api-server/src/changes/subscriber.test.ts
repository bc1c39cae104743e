import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import type { ChangeHead, Logger, PinnedGeneration, ReadableCache } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import type { EndpointRegistry } from '../registry.js';
import { FeedPhase } from './feed-phase.js';
import type { GenerationFollower } from './follower.js';
import { type FeedContext, FeedSubscriber, type HeldGeneration } from './subscriber.js';

// Unit tests of the subscriber's phase discipline with a fake hub (the HTTP behaviour of change feeds, with
// real caches, processes and sockets, is in test/changes.test.ts and test/switching.test.ts).

const EMPTY_HEAD: ChangeHead = { first: 1, last: 0 };

function fakeCache(name: string, endpoint: string): ReadableCache & { closed: number } {
  const pin: PinnedGeneration = { head: EMPTY_HEAD, read: () => [], records: () => [], close: () => {} };
  const cache = {
    name,
    endpoint,
    closed: 0,
    schema: { primaryKey: ['id'] },
    changeLog: () => ({ head: () => EMPTY_HEAD, read: () => [], pin: () => pin }),
    close: async () => {
      cache.closed += 1;
    },
  };
  return cache as unknown as ReadableCache & { closed: number };
}

function fakeResponse(): ServerResponse & EventEmitter {
  const res = new EventEmitter() as ServerResponse & EventEmitter;
  Object.assign(res, {
    writableLength: 0,
    write: () => true,
    end: () => res.emit('close'),
    destroy: () => res.emit('close'),
  });
  return res;
}

/** A hub serving `alias` from generation `g2`; it counts the leases it hands out and gets back. */
function fakeHub(openGeneration: (name: string) => Promise<ReadableCache>) {
  const leases = { acquired: 0, released: 0 };
  const attached = new Set<unknown>();
  const current = fakeCache('g2', 'items');
  const registry = {
    reconcile: async () => {},
    current: () => ({ name: 'g2' }),
    openGeneration,
  } as unknown as EndpointRegistry;
  const follower = {
    lastSeen: 0,
    add: (feed: unknown) => attached.add(feed),
    remove: (feed: unknown) => attached.delete(feed),
  } as unknown as GenerationFollower;
  const ctx: FeedContext = {
    alias: 'items',
    registry,
    logger: { warn: () => {}, info: () => {}, debug: () => {}, error: () => {} } as unknown as Logger,
    seal: null,
    bufferBytes: 1 << 20,
    drainTimeoutMs: 1_000,
    follower: () => follower,
    detach: (_generation, feed) => attached.delete(feed),
    current: (): HeldGeneration => {
      leases.acquired += 1;
      const release = () => {
        leases.released += 1;
      };
      return { name: 'g2', cache: current, release };
    },
    onCutOff: () => {},
    onClose: () => {},
  };
  return { ctx, leases, attached };
}

/** Settles after `promise`'s continuations ran. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('FeedSubscriber', () => {
  it('stays closed when its connection closes while a resume opens a generation that is gone', async () => {
    let fail!: (err: Error) => void;
    const opening = new Promise<ReadableCache>((_resolve, reject) => {
      fail = reject;
    });
    const hub = fakeHub(() => opening);
    const res = fakeResponse();
    const feed = new FeedSubscriber(hub.ctx, res, null);
    const running = feed.run(
      { kind: 'resume', position: { endpoint: 'items', generation: 'g1', seq: 3 } },
      hub.ctx.current(),
    );
    await settle();
    res.emit('close');
    fail(new Error('generation g1 was deleted'));
    await running;

    // A closed subscriber must not start a snapshot: no new lease, nothing left on the follower.
    expect(feed.phase).toBe(FeedPhase.closed);
    expect(hub.leases).toEqual({ acquired: 1, released: 1 });
    expect(hub.attached.size).toBe(0);
  });

  it('closes the old generation it opened for a resume when its connection closed meanwhile', async () => {
    const old = fakeCache('g1', 'items');
    let open!: (cache: ReadableCache) => void;
    const opening = new Promise<ReadableCache>((resolve) => {
      open = resolve;
    });
    const hub = fakeHub(() => opening);
    const res = fakeResponse();
    const feed = new FeedSubscriber(hub.ctx, res, null);
    const running = feed.run(
      { kind: 'resume', position: { endpoint: 'items', generation: 'g1', seq: 0 } },
      hub.ctx.current(),
    );
    await settle();
    res.emit('close');
    open(old);
    await running;

    expect(feed.phase).toBe(FeedPhase.closed);
    expect(old.closed).toBe(1);
    expect(hub.leases).toEqual({ acquired: 1, released: 1 });
    expect(hub.attached.size).toBe(0);
  });

  it('goes live from a snapshot and then closes for good', async () => {
    const hub = fakeHub(() => Promise.reject(new Error('not used')));
    const res = fakeResponse();
    const feed = new FeedSubscriber(hub.ctx, res, null);
    await feed.run({ kind: 'snapshot' }, hub.ctx.current());
    expect(feed.phase).toBe(FeedPhase.live);
    expect(hub.attached.has(feed)).toBe(true);

    feed.end();
    expect(feed.phase).toBe(FeedPhase.closed);
    expect(hub.attached.size).toBe(0);
    expect(hub.leases.acquired).toBe(hub.leases.released);
    // Late calls from the follower do nothing to a closed subscriber.
    feed.fellBehind();
    feed.generationLeft();
    await settle();
    expect(feed.phase).toBe(FeedPhase.closed);
    expect(hub.leases.acquired).toBe(hub.leases.released);
  });
});
