/**
 * The contract of {@link PendingSends}, which keeps the backplane's sends (a switch's `SnapshottingDone` and
 * `AliasRedirected`, a rollback's redirect) off the data path: each send starts before `start` returns and is never
 * awaited by its caller, a failure goes to the failure callback and never to the caller, and `settle` waits for the
 * sends started so far, bounded. Sends here are promises the test settles itself, so nothing depends on timing.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PendingSends } from './pending-sends.js';

/** A promise the test settles when it chooses. */
function deferred(): { promise: Promise<void>; resolve: () => void; reject: (err: unknown) => void } {
  let resolve = () => {};
  let reject: (err: unknown) => void = () => {};
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets every settled promise run its handlers, and Node report any rejection left unhandled. */
const drained = () => new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve)));

/** A send that never settles (a hung NATS that never answers a flush). */
const never = () => new Promise<void>(() => {});

const noFailure = (err: unknown) => {
  throw new Error(`unexpected failure: ${String(err)}`);
};

describe('PendingSends', () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => {
    unhandled.push(reason);
  };
  beforeEach(() => {
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });
  afterEach(() => {
    process.off('unhandledRejection', onUnhandled);
  });

  it('calls each send before start returns, in the order started, and does not wait for it', () => {
    const sends = new PendingSends();
    const calls: string[] = [];
    const returned = sends.start(() => {
      calls.push('first');
      return never();
    }, noFailure);
    // Already called, though it never settles: the caller went on at once.
    expect({ returned, calls: [...calls], size: sends.size }).toEqual({
      returned: undefined,
      calls: ['first'],
      size: 1,
    });
    sends.start(() => {
      calls.push('second');
      return never();
    }, noFailure);
    expect({ calls, size: sends.size }).toEqual({ calls: ['first', 'second'], size: 2 });
  });

  it('promises the order of the calls only: a later send may settle first, and each leaves the count when it settles', async () => {
    const sends = new PendingSends();
    const first = deferred();
    const second = deferred();
    sends.start(() => first.promise, noFailure);
    sends.start(() => second.promise, noFailure);
    second.resolve();
    await drained();
    expect(sends.size).toBe(1);
    first.resolve();
    await drained();
    expect(sends.size).toBe(0);
  });

  it('hands a rejected send to the failure callback, never to the caller', async () => {
    const sends = new PendingSends();
    const failures: unknown[] = [];
    const refused = new Error('NATS is reconnecting');
    expect(() =>
      sends.start(
        () => Promise.reject(refused),
        (err) => failures.push(err),
      ),
    ).not.toThrow();
    await drained();
    expect({ failures, size: sends.size, unhandled }).toEqual({
      failures: [refused],
      size: 0,
      unhandled: [],
    });
  });

  it('hands a send that throws before returning a promise to the failure callback, never to the caller', async () => {
    const sends = new PendingSends();
    const failures: unknown[] = [];
    const invalid = new Error('invalid event');
    expect(() =>
      sends.start(
        () => {
          throw invalid;
        },
        (err) => failures.push(err),
      ),
    ).not.toThrow();
    await drained();
    expect({ failures, size: sends.size, unhandled }).toEqual({
      failures: [invalid],
      size: 0,
      unhandled: [],
    });
  });

  it('keeps a failure callback that throws from becoming an unhandled rejection', async () => {
    const sends = new PendingSends();
    sends.start(
      () => Promise.reject(new Error('refused')),
      () => {
        throw new Error('the logger failed too');
      },
    );
    await drained();
    expect({ size: sends.size, unhandled }).toEqual({ size: 0, unhandled: [] });
    // A failed send counts as settled for close: nothing is left to wait for.
    expect(await sends.settle(60_000)).toBe(0);
  });

  it('settle resolves 0 at once when nothing is under way', async () => {
    expect(await new PendingSends().settle(60_000)).toBe(0);
  });

  it('settle waits for the sends under way to settle, failed ones included, and then says none is left', async () => {
    const sends = new PendingSends();
    const ok = deferred();
    const refused = deferred();
    const failures: unknown[] = [];
    sends.start(() => ok.promise, noFailure);
    sends.start(
      () => refused.promise,
      (err) => failures.push(err),
    );
    let left: number | null = null;
    const settling = sends.settle(60_000).then((n) => {
      left = n;
    });
    ok.resolve();
    // Time passes (far less than the bound): one of the two is still under way, and settle has not given up on it.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect({ left, size: sends.size }).toEqual({ left: null, size: 1 });
    refused.reject(new Error('timed out'));
    await settling;
    expect({ left, size: sends.size, failures: failures.length }).toEqual({ left: 0, size: 0, failures: 1 });
  });

  it('settle is bounded: a send that never settles is left under way and counted, and leaves once it settles later', async () => {
    const sends = new PendingSends();
    const hung = deferred();
    sends.start(() => hung.promise, noFailure);
    expect(await sends.settle(20)).toBe(1);
    expect(sends.size).toBe(1);
    // Left to the backplane, not abandoned: its settling still takes it off the count.
    hung.resolve();
    await drained();
    expect(sends.size).toBe(0);
  });

  it('settle waits only for the sends started before it was called', async () => {
    const sends = new PendingSends();
    const earlier = deferred();
    sends.start(() => earlier.promise, noFailure);
    const settling = sends.settle(60_000);
    sends.start(never, noFailure);
    earlier.resolve();
    // Resolves once the earlier send settled, without waiting out its bound for the later one, which it counts.
    expect(await settling).toBe(1);
  });
});
