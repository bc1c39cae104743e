// The NATS client options a `nats` configuration means — one definition for every NATS connection Sluice opens:
// the backplane's and the pipeline's JetStream sources and sinks. Core has no NATS client (it imports nothing of
// the kind); the caller passes its client's authenticator factories and gets options that client takes as they are.
import { readFileSync } from 'node:fs';
import { type NatsConfig, NatsConfigSchema } from './config/nats.js';
import { ConfigError } from './errors.js';
import { configErrorOf } from './validation.js';

/** The authenticator factories of the NATS client in use (`@nats-io/transport-node` exports both). */
export interface NatsAuthenticatorFactories<A> {
  nkeyAuthenticator(seed: Uint8Array): A;
  credsAuthenticator(creds: () => Uint8Array): A;
}

/** Client options, shaped as `@nats-io/transport-node`'s `NodeConnectionOptions` (a subset of it). */
export interface NatsClientOptions<A> {
  name: string;
  servers: string | string[];
  reconnect: true;
  /** Never give up reconnecting: a NATS outage of any length ends when NATS is back. */
  maxReconnectAttempts: -1;
  ignoreAuthErrorAbort: true;
  pingInterval: number;
  maxPingOut: number;
  timeout: number;
  reconnectDelayHandler?: () => number;
  user?: string;
  pass?: string;
  token?: string;
  authenticator?: A;
  tls?: { rejectUnauthorized: boolean; caFile?: string; certFile?: string; keyFile?: string };
}

/** Options of {@link natsClientOptions}. */
export interface NatsClientOptionsInput<A> {
  /** The connection's name, as the server's monitoring shows it. */
  name: string;
  authenticators: NatsAuthenticatorFactories<A>;
  /** The wait before each reconnect attempt (default: the client's, 2 s with jitter). */
  reconnectDelay?: () => number;
  /** Where the configuration sits, for error paths (default `nats`; e.g. `connections.bus.nats`). */
  key?: string;
}

/** Liveness and connect bounds of every connection. */
const CONNECTION_BOUNDS = {
  // Without this, two auth failures in a row (e.g. while a restarted server loads its config) stop reconnecting.
  ignoreAuthErrorAbort: true,
  // Detects a silently dead connection within ~20 s instead of the 2-minute default.
  pingInterval: 10_000,
  maxPingOut: 2,
  timeout: 5_000,
} as const;

function readSecretFile(path: string, key: string): Uint8Array {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new ConfigError(
      `Cannot read the NATS file ${path} (${key})`,
      [{ path: key, message: (err as Error).message }],
      { cause: err },
    );
  }
}

/**
 * The NATS client options a `nats` configuration (a URL, or servers plus credentials and TLS) means: user/password,
 * token, an nkey seed or a creds file (re-read on every connect, so rotated credentials are picked up), TLS files,
 * and the reconnect and liveness settings. Refuses what cannot work with `CONFIG_INVALID` at its key, before any
 * connection: an invalid configuration (e.g. both `credsFile` and `nkeySeed`), a creds or TLS file it cannot read.
 *
 * @example
 * ```ts
 * import { connect, credsAuthenticator, nkeyAuthenticator } from '@nats-io/transport-node';
 * const nc = await connect(
 *   natsClientOptions(config.nats, { name: 'sluice:n1', authenticators: { nkeyAuthenticator, credsAuthenticator } }),
 * );
 * ```
 */
export function natsClientOptions<A>(
  config: NatsConfig,
  input: NatsClientOptionsInput<A>,
): NatsClientOptions<A> {
  const key = input.key ?? 'nats';
  const result = NatsConfigSchema.safeParse(config);
  if (!result.success)
    throw configErrorOf(result.error, {
      rename: (path) => (path === '(root)' ? key : `${key}.${path}`),
      context: { schema: NatsConfigSchema, input: config },
    });
  const parsed = result.data;
  const base = {
    name: input.name,
    reconnect: true,
    maxReconnectAttempts: -1,
    ...CONNECTION_BOUNDS,
    ...(input.reconnectDelay ? { reconnectDelayHandler: input.reconnectDelay } : {}),
  } as const;
  if (typeof parsed === 'string') return { ...base, servers: parsed };
  let authenticator: A | undefined;
  // The schema allows one of the two: a creds file carries its own nkey seed.
  if (parsed.nkeySeed !== undefined)
    authenticator = input.authenticators.nkeyAuthenticator(new TextEncoder().encode(parsed.nkeySeed));
  if (parsed.credsFile !== undefined) {
    const path = parsed.credsFile;
    const at = `${key}.credsFile`;
    readSecretFile(path, at);
    authenticator = input.authenticators.credsAuthenticator(() => readSecretFile(path, at));
  }
  const tls = parsed.tls;
  if (tls) {
    for (const [what, file] of [
      ['caFile', tls.caFile],
      ['certFile', tls.certFile],
      ['keyFile', tls.keyFile],
    ] as const) {
      if (file) readSecretFile(file, `${key}.tls.${what}`);
    }
  }
  return {
    ...base,
    servers: parsed.servers,
    ...(parsed.user !== undefined ? { user: parsed.user } : {}),
    ...(parsed.pass !== undefined ? { pass: parsed.pass } : {}),
    ...(parsed.token !== undefined ? { token: parsed.token } : {}),
    ...(authenticator !== undefined ? { authenticator } : {}),
    ...(tls
      ? {
          tls: {
            rejectUnauthorized: tls.rejectUnauthorized,
            ...(tls.caFile ? { caFile: tls.caFile } : {}),
            ...(tls.certFile ? { certFile: tls.certFile } : {}),
            ...(tls.keyFile ? { keyFile: tls.keyFile } : {}),
          },
        }
      : {}),
  };
}
