/** What {@link within} resolves with when `work` did not settle in time. */
export const TIMED_OUT = Symbol('timed out');

/**
 * `work`'s value, or {@link TIMED_OUT} once `timeoutMs` passed first (the work goes on; nobody waits for it). A
 * rejection of `work` within the time rejects. The backplane's bounded waits on a server that may hang (a drain, a
 * flush, a ping) — a hung nats-server confirms nothing, and closing must not wait for it forever.
 *
 * @example
 * ```ts
 * if ((await within(nc.flush(), 1_000)) === TIMED_OUT) markUnhealthy();
 * ```
 */
export async function within<T>(work: Promise<T>, timeoutMs: number): Promise<T | typeof TIMED_OUT> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(() => resolve(TIMED_OUT), timeoutMs);
  });
  try {
    return await Promise.race([work, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}
