import type { SourceItem } from './types.js';

export interface BranchItem {
  branch: number;
  item: SourceItem;
}

/**
 * Merges several sources into one stream with a bounded queue: each source runs ahead by at most
 * `capacity` items, then waits until the consumer takes one (backpressure across fan-in).
 */
export async function* mergeSources(
  sources: ReadonlyArray<AsyncIterable<SourceItem>>,
  capacity = 2,
): AsyncGenerator<BranchItem> {
  if (sources.length === 1) {
    for await (const item of sources[0]!) yield { branch: 0, item };
    return;
  }
  const queue: BranchItem[] = [];
  let wakeConsumer: (() => void) | null = null;
  const wakeProducers: Array<() => void> = [];
  const state: { failure: { error: unknown } | null } = { failure: null };
  let running = sources.length;
  let stopped = false;
  const notify = () => {
    wakeConsumer?.();
    wakeConsumer = null;
  };
  const pumps = sources.map(async (source, branch) => {
    try {
      for await (const item of source) {
        if (stopped) return;
        while (queue.length >= capacity * sources.length && !stopped)
          await new Promise<void>((resolve) => wakeProducers.push(resolve));
        queue.push({ branch, item });
        notify();
      }
    } catch (error) {
      state.failure ??= { error };
    } finally {
      running--;
      notify();
    }
  });
  try {
    for (;;) {
      if (state.failure) throw state.failure.error;
      const next = queue.shift();
      if (next) {
        wakeProducers.shift()?.();
        yield next;
        continue;
      }
      if (running === 0) break;
      await new Promise<void>((resolve) => {
        wakeConsumer = resolve;
      });
    }
  } finally {
    stopped = true;
    for (const wake of wakeProducers.splice(0)) wake();
    void Promise.allSettled(pumps);
  }
}
