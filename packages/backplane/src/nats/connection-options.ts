import type { NodeConnectionOptions } from '@nats-io/transport-node';
import { credsAuthenticator, nkeyAuthenticator } from '@nats-io/transport-node';
import { type NatsConfig, natsClientOptions } from '@sluice/core';

export interface ReconnectPolicy {
  /** First wait after a lost connection (default 50 ms). */
  initialDelayMs: number;
  /** Cap of the exponential backoff (default 1000 ms). */
  maxDelayMs: number;
}

export const DEFAULT_RECONNECT: ReconnectPolicy = { initialDelayMs: 50, maxDelayMs: 1_000 };

/**
 * Exponential backoff with jitter for reconnect attempts. The NATS client asks for the delay on every pass of its
 * dial loop, so the value must stay stable within one attempt: it only changes when `failure()` is called.
 */
export class Backoff {
  #attempt = 0;
  #current: number;
  readonly #policy: ReconnectPolicy;

  constructor(policy: ReconnectPolicy) {
    this.#policy = policy;
    this.#current = policy.initialDelayMs;
  }

  delay(): number {
    return this.#current;
  }

  failure(): void {
    this.#attempt += 1;
    const base = Math.min(this.#policy.maxDelayMs, this.#policy.initialDelayMs * 2 ** this.#attempt);
    // Up to 20 % jitter so a fleet reconnecting to a restarted server does not arrive in one burst.
    this.#current = Math.round(base * (0.8 + Math.random() * 0.2));
  }

  reset(): void {
    this.#attempt = 0;
    this.#current = this.#policy.initialDelayMs;
  }
}

/**
 * The backplane's client options: core's one definition of what a `nats` configuration means (shared with the
 * pipeline's JetStream connections), with the backplane's own reconnect backoff.
 *
 * @example
 * ```ts
 * natsConnectionOptions({ servers: 'tls://nats:4222', nkeySeed: 'SUA…', tls: { caFile: '/etc/ca.pem' } }, 'node-1', backoff)
 * ```
 */
export function natsConnectionOptions(
  config: NatsConfig,
  name: string,
  backoff: Backoff,
): NodeConnectionOptions {
  return natsClientOptions(config, {
    name,
    authenticators: { nkeyAuthenticator, credsAuthenticator },
    reconnectDelay: () => backoff.delay(),
  });
}
