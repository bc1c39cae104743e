import { describe, expect, it } from 'vitest';
import { Coalescer, type Settled } from './coalescer.js';

/** A batch runner whose batches the test releases by hand, recording what each carried. */
function heldRunner() {
  const batches: string[][] = [];
  const release: Array<(fail?: Error) => void> = [];
  const run = (items: readonly { key: string; n: number }[]) => {
    batches.push(items.map((i) => `${i.key}:${i.n}`));
    return new Promise<Settled<number>[]>((resolve, reject) => {
      release.push((fail) =>
        fail
          ? reject(fail)
          : resolve(
              items.map((i) =>
                i.key === 'poison'
                  ? { ok: false, error: new Error('poisoned') }
                  : { ok: true, value: i.n * 10 },
              ),
            ),
      );
    });
  };
  return { batches, release, run };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('Coalescer', () => {
  it('sends a lone item at once, and items arriving meanwhile together once a batch slot frees', async () => {
    const r = heldRunner();
    const c = new Coalescer(r.run, { maxInFlight: 1, maxBatch: 64, keyOf: (i) => i.key });
    const first = c.add({ key: 'a', n: 1 });
    expect(r.batches).toEqual([['a:1']]); // no waiting for company when nothing is in flight
    const later = [c.add({ key: 'b', n: 2 }), c.add({ key: 'c', n: 3 }), c.add({ key: 'd', n: 4 })];
    expect(r.batches).toHaveLength(1);
    r.release[0]!();
    expect(await first).toBe(10);
    await tick();
    expect(r.batches).toEqual([['a:1'], ['b:2', 'c:3', 'd:4']]);
    r.release[1]!();
    expect(await Promise.all(later)).toEqual([20, 30, 40]);
  });

  it('never puts one key twice in a batch, and caps the batch size', async () => {
    const r = heldRunner();
    const c = new Coalescer(r.run, { maxInFlight: 1, maxBatch: 2, keyOf: (i) => i.key });
    const all = [
      c.add({ key: 'a', n: 1 }),
      c.add({ key: 'a', n: 2 }),
      c.add({ key: 'b', n: 3 }),
      c.add({ key: 'c', n: 4 }),
    ];
    for (let i = 0; i < 3; i++) {
      r.release[i]!();
      await tick();
    }
    expect(r.batches).toEqual([['a:1'], ['a:2', 'b:3'], ['c:4']]);
    expect(await Promise.all(all)).toEqual([10, 20, 30, 40]);
  });

  it('a failed batch rejects each of its items with its error and leaves the next batch unaffected', async () => {
    const r = heldRunner();
    const c = new Coalescer(r.run, { maxInFlight: 1, maxBatch: 64, keyOf: (i) => i.key });
    const first = c.add({ key: 'a', n: 1 });
    const second = [c.add({ key: 'b', n: 2 }), c.add({ key: 'c', n: 3 })];
    r.release[0]!(new Error('connection terminated'));
    await expect(first).rejects.toThrow('connection terminated');
    await tick();
    r.release[1]!(new Error('still down'));
    for (const p of second) await expect(p).rejects.toThrow('still down');
    const third = c.add({ key: 'd', n: 4 });
    r.release[2]!();
    expect(await third).toBe(40);
  });

  it('an item that failed alone rejects alone; its batch-mates get their values', async () => {
    const r = heldRunner();
    const c = new Coalescer(r.run, { maxInFlight: 1, maxBatch: 64, keyOf: (i) => i.key });
    const ok = c.add({ key: 'a', n: 1 });
    const poisoned = c.add({ key: 'poison', n: 2 });
    const alsoOk = c.add({ key: 'b', n: 3 });
    r.release[0]!();
    await tick();
    r.release[1]!();
    expect(await ok).toBe(10);
    await expect(poisoned).rejects.toThrow('poisoned');
    expect(await alsoOk).toBe(30);
  });

  it('runs up to maxInFlight batches at once', async () => {
    const r = heldRunner();
    const c = new Coalescer(r.run, { maxInFlight: 2, maxBatch: 64, keyOf: (i) => i.key });
    const all = ['a', 'b', 'c', 'd'].map((key, n) => c.add({ key, n }));
    expect(r.batches).toEqual([['a:0'], ['b:1']]);
    r.release[1]!();
    await tick();
    expect(r.batches).toEqual([['a:0'], ['b:1'], ['c:2', 'd:3']]);
    r.release[0]!();
    r.release[2]!();
    expect(await Promise.all(all)).toEqual([0, 10, 20, 30]);
  });
});
