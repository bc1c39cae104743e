import { readFileSync } from 'node:fs';
import type { Authenticator, NodeConnectionOptions } from '@nats-io/transport-node';
import { credsAuthenticator, nkeyAuthenticator } from '@nats-io/transport-node';
import type { NatsConfig } from '@sluice/core';
import { ConfigError, NatsConfigSchema, parseConfigOrThrow } from '@sluice/core';

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

function readSecretFile(path: string, what: string): Uint8Array {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new ConfigError(
      `Cannot read the NATS ${what} file ${path}`,
      [{ path: `nats.${what}`, message: (err as Error).message }],
      {
        cause: err,
      },
    );
  }
}

/**
 * Turns core's `NatsConfig` (a URL, or servers plus credentials and TLS) into client options. Credentials pass
 * through unchanged: user/password, token, an nkey seed, or a creds file (re-read on every connect so rotated
 * credentials are picked up).
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
  const parsed = parseConfigOrThrow(NatsConfigSchema, config);
  const base: NodeConnectionOptions = {
    name,
    reconnect: true,
    maxReconnectAttempts: -1,
    // Without this, two auth failures in a row (e.g. while a restarted server loads its config) stop reconnecting.
    ignoreAuthErrorAbort: true,
    reconnectDelayHandler: () => backoff.delay(),
    // Detects a silently dead connection within ~20 s instead of the 2-minute default.
    pingInterval: 10_000,
    maxPingOut: 2,
    timeout: 5_000,
  };
  if (typeof parsed === 'string') return { ...base, servers: parsed };
  const authenticators: Authenticator[] = [];
  if (parsed.nkeySeed) {
    const seed = new TextEncoder().encode(parsed.nkeySeed);
    authenticators.push(nkeyAuthenticator(seed));
  }
  if (parsed.credsFile) {
    const path = parsed.credsFile;
    readSecretFile(path, 'credsFile');
    authenticators.push(credsAuthenticator(() => readSecretFile(path, 'credsFile')));
  }
  if (parsed.tls) {
    const { caFile, certFile, keyFile } = parsed.tls;
    for (const [what, file] of [
      ['tls.caFile', caFile],
      ['tls.certFile', certFile],
      ['tls.keyFile', keyFile],
    ] as const) {
      if (file) readSecretFile(file, what);
    }
  }
  return {
    ...base,
    servers: parsed.servers,
    ...(parsed.user !== undefined ? { user: parsed.user } : {}),
    ...(parsed.pass !== undefined ? { pass: parsed.pass } : {}),
    ...(parsed.token !== undefined ? { token: parsed.token } : {}),
    ...(authenticators.length > 0 ? { authenticator: authenticators } : {}),
    ...(parsed.tls
      ? {
          tls: {
            rejectUnauthorized: parsed.tls.rejectUnauthorized,
            ...(parsed.tls.caFile ? { caFile: parsed.tls.caFile } : {}),
            ...(parsed.tls.certFile ? { certFile: parsed.tls.certFile } : {}),
            ...(parsed.tls.keyFile ? { keyFile: parsed.tls.keyFile } : {}),
          },
        }
      : {}),
  };
}
