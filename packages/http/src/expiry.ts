/**
 * When a stream's bearer token expires, its connection ends: a JWT cannot be revoked, so its `exp` is the issuer's
 * only way to take access back, and a stream (the query API's change feed, the control API's endpoint stream) is one
 * request that may last for days. The client reconnects; with the expired token that is a 401, with a renewed one
 * it goes on.
 */

/** The longest delay `setTimeout` honours (a longer one fires at once); later expiries are re-armed in steps. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Calls `onExpired` once at `expiresAt` (epoch milliseconds), never synchronously: a feed being set up is not ended
 * under its own feet (the next turn at the earliest, if that instant has passed). Returns the cancel function. The
 * timer does not keep the process alive.
 *
 * @example
 * ```ts
 * const cancel = atExpiry(grant.expiresAt, () => res.end());
 * res.on('close', cancel);
 * ```
 */
export function atExpiry(expiresAt: number, onExpired: () => void, now: () => number = Date.now): () => void {
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    const remaining = Math.max(0, expiresAt - now());
    timer = setTimeout(
      () => {
        if (expiresAt - now() > 0) return arm(); // a step of a far expiry, or a timer a millisecond early
        timer = undefined;
        onExpired();
      },
      Math.min(remaining, MAX_TIMER_MS),
    );
    timer.unref();
  };
  arm();
  return () => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  };
}
