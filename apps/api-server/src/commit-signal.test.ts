import type { CommitState, ReadableCache } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { CommitSignal } from './commit-signal.js';

/** A cache whose commit state is what the test says, counting how often it is looked at. */
function fakeCache() {
  let state = Object.freeze({ checkpoint: null, recordCount: 0 }) as unknown as Readonly<CommitState>;
  const cache = {
    looks: 0,
    servingState() {
      cache.looks++;
      return state;
    },
    commit() {
      state = Object.freeze({ ...state, recordCount: state.recordCount + 1 });
    },
  };
  return cache;
}

describe('CommitSignal', () => {
  it('wakes every waiter of an alias at its next commit, with one look per tick however many wait', async () => {
    const cache = fakeCache();
    const signal = new CommitSignal(() => cache as unknown as ReadableCache, 1);
    const seen = { cache: cache as unknown as ReadableCache, state: cache.servingState() };
    let woken = 0;
    const waits = Array.from({ length: 20 }, () => signal.next('items', seen, 10_000).then(() => woken++));
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(woken).toBe(0);
    const looksBefore = cache.looks;
    // Each tick looks once for all 20 waiters (not once per waiter).
    expect(looksBefore).toBeLessThan(60);
    const committedAt = performance.now();
    cache.commit();
    await Promise.all(waits);
    expect(woken).toBe(20);
    expect(performance.now() - committedAt).toBeLessThan(100);
    expect(signal.waiting).toBe(0);
    // Nobody waits: nothing is looked at any more.
    const looksAfter = cache.looks;
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(cache.looks).toBe(looksAfter);
  });

  it('wakes a waiter whose alias moved to another generation, and one whose time is up', async () => {
    const first = fakeCache();
    const second = fakeCache();
    let serving = first;
    const signal = new CommitSignal(() => serving as unknown as ReadableCache, 1);
    const seen = { cache: first as unknown as ReadableCache, state: first.servingState() };
    const started = Date.now();
    await signal.next('items', seen, 50);
    expect(Date.now() - started).toBeGreaterThanOrEqual(45);
    const moved = signal.next('items', seen, 10_000);
    serving = second;
    await moved;
    expect(signal.waiting).toBe(0);
  });
});
