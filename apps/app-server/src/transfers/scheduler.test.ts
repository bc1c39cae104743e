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
});
