import { describe, expect, it } from 'vitest';
import { Scheduler } from './scheduler.js';

describe('Scheduler', () => {
  it('runs at most `concurrency` jobs, queues up to `queueSize`, refuses beyond', async () => {
    const scheduler = new Scheduler({ concurrency: 2, queueSize: 1 });
    let active = 0;
    let peak = 0;
    const gates: Array<() => void> = [];
    const job = () =>
      new Promise<void>((resolve) => {
        active++;
        peak = Math.max(peak, active);
        gates.push(() => {
          active--;
          resolve();
        });
      });
    for (let i = 0; i < 3; i++) scheduler.start(scheduler.tryReserve()!, job);
    expect(scheduler.running).toBe(2);
    expect(scheduler.queued).toBe(1);
    expect(scheduler.tryReserve()).toBeNull();
    gates.shift()!();
    await new Promise((r) => setImmediate(r));
    expect(scheduler.running).toBe(2);
    expect(scheduler.queued).toBe(0);
    const ticket = scheduler.tryReserve();
    expect(ticket).not.toBeNull();
    expect(scheduler.tryReserve()).toBeNull();
    scheduler.cancel(ticket!);
    expect(scheduler.free).toBe(1);
    while (gates.length) gates.shift()!();
    await scheduler.idle();
    expect(peak).toBe(2);
    expect(scheduler.free).toBe(3);
  });

  it('reserve() waits for provisional reservations before refusing, and refuses when they became work', async () => {
    const scheduler = new Scheduler({ concurrency: 1, queueSize: 1 });
    scheduler.start(scheduler.tryReserve()!, () => new Promise(() => {}));
    const duplicate = scheduler.tryReserve({ provisional: true })!;
    expect(scheduler.tryReserve()).toBeNull();
    // Dropped (it was a duplicate): the waiting reservation gets its place.
    const waiting = scheduler.reserve();
    scheduler.cancel(duplicate);
    const ticket = await waiting;
    expect(ticket).not.toBeNull();
    expect(scheduler.free).toBe(0);
    scheduler.cancel(ticket!);
    // Used (it was new work): the place is taken, and the waiting reservation is refused.
    const created = scheduler.tryReserve({ provisional: true })!;
    const refused = scheduler.reserve();
    scheduler.start(created, () => new Promise(() => {}));
    expect(await refused).toBeNull();
    // Only provisional reservations are waited for.
    expect(await scheduler.reserve()).toBeNull();
  });

  it('withdraw takes a waiting job out of the queue and frees its place; a started job is not withdrawn', async () => {
    const scheduler = new Scheduler({ concurrency: 1, queueSize: 1 });
    let release!: () => void;
    const withdrawRunning = scheduler.start(
      scheduler.tryReserve()!,
      () => new Promise<void>((resolve) => (release = resolve)),
    );
    let ran = false;
    const withdraw = scheduler.start(scheduler.tryReserve()!, async () => {
      ran = true;
    });
    expect(scheduler.tryReserve()).toBeNull();
    expect(withdrawRunning()).toBe(false);
    expect(withdraw()).toBe(true);
    expect(withdraw()).toBe(false);
    expect(scheduler.queued).toBe(0);
    expect(scheduler.free).toBe(1);
    release();
    await scheduler.idle();
    expect(ran).toBe(false);
  });
});
