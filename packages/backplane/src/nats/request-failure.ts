/**
 * What a failed NATS request means for "who runs X?" and "stop X": a certain `nobody`, or `unknown` (with
 * `silent` when the owner merely did not answer in time). The library's typed errors decide, never `err.name`.
 */
import { RequestError, TimeoutError } from '@nats-io/transport-node';
import type { UnknownAnswer } from '@sluice/core';
import type { ConnectionHealth } from './connection-health.js';

/** A failed request: nobody serves the transfer, or the answer is unknown (why, and whether the owner was silent). */
export type RequestFailure = { nobody: true } | { nobody: false; reason: string; silent?: boolean };

/** How a second, short ask of the same subject ended (see {@link classifyFailure}). */
export type SecondAsk = 'answered' | 'no-responders' | 'no-answer';

/**
 * Classifies a failed request. Only "no responders" on a settled connection (asked while settled, and still
 * settled when the answer came) is a certain "nobody" — answered at once, so a resend after an owner's crash
 * is taken over in milliseconds. A timeout is `silent` (someone is subscribed but did not answer: a hung
 * owner) only if the connection is settled and the server still answers a ping; a stalled server or
 * connection makes it plain `unknown`. Before saying `silent`, the same question is asked once more (`askAgain`,
 * briefly): a subscriber the server routed the first one to may have been a dead owner's whose closed socket the
 * server had not processed yet (an owner killed an instant before) — "no responders" now, on a settled
 * connection, is as certain a `nobody` as any.
 *
 * @example
 * ```ts
 * const failure = await classifyFailure(health, err, 2_000, settledWhenAsked, (ms) => askOnce(subject, ms));
 * return failure.nobody ? { status: 'nobody' } : unknownOf(failure);
 * ```
 */
export async function classifyFailure(
  health: ConnectionHealth,
  err: unknown,
  timeoutMs: number,
  settledWhenAsked: boolean,
  askAgain?: (timeoutMs: number) => Promise<SecondAsk>,
): Promise<RequestFailure> {
  if (err instanceof RequestError && err.isNoResponders()) {
    if (!settledWhenAsked || !health.settled()) {
      return {
        nobody: false,
        reason: `no responders, but this node's NATS connection is ${health.status()} and not settled: owners may not be back yet`,
      };
    }
    return { nobody: true };
  }
  const timedOut =
    err instanceof TimeoutError || (err instanceof RequestError && err.cause instanceof TimeoutError);
  if (timedOut) {
    const reason = `the owner did not answer within ${timeoutMs} ms`;
    if (!settledWhenAsked || !health.settled()) return { nobody: false, reason };
    const probeMs = Math.max(50, Math.min(timeoutMs, 500));
    if (!(await health.serverAnswers(probeMs))) {
      health.unsettle();
      return {
        nobody: false,
        reason: `${reason}, and NATS itself did not answer a ping within ${probeMs} ms`,
      };
    }
    // The server is fine, so the question reached a subscription — possibly of an owner that died just before it,
    // whose close the server has processed by now. A hung owner does not answer this one either: still silent.
    if (askAgain && (await askAgain(probeMs)) === 'no-responders' && health.settled())
      return { nobody: true };
    return { nobody: false, reason, silent: true };
  }
  return { nobody: false, reason: `NATS request failed: ${(err as Error)?.message ?? String(err)}` };
}

/** The `unknown` answer of a failed request (keeping `silent` when the owner merely did not answer in time). */
export function unknownOf(failure: { reason: string; silent?: boolean }): UnknownAnswer {
  return { status: 'unknown', reason: failure.reason, ...(failure.silent ? { silent: true } : {}) };
}
