import { readFile } from 'node:fs/promises';
import {
  connect,
  credsAuthenticator,
  type NatsConnection,
  type NodeConnectionOptions,
  nkeyAuthenticator,
} from '@nats-io/transport-node';
import type { NatsConfig } from '@sluice/core';

/** Opens a NATS connection from a configuration entry (a URL, or servers with credentials and TLS). */
export async function connectNats(config: NatsConfig, name = 'sluice-pipeline'): Promise<NatsConnection> {
  if (typeof config === 'string') return connect({ servers: config, name, maxReconnectAttempts: -1 });
  const options: NodeConnectionOptions = { servers: config.servers, name, maxReconnectAttempts: -1 };
  if (config.user !== undefined) options.user = config.user;
  if (config.pass !== undefined) options.pass = config.pass;
  if (config.token !== undefined) options.token = config.token;
  if (config.nkeySeed !== undefined)
    options.authenticator = nkeyAuthenticator(new TextEncoder().encode(config.nkeySeed));
  if (config.credsFile !== undefined)
    options.authenticator = credsAuthenticator(new Uint8Array(await readFile(config.credsFile)));
  if (config.tls) {
    options.tls = {
      ...(config.tls.caFile ? { caFile: config.tls.caFile } : {}),
      ...(config.tls.certFile ? { certFile: config.tls.certFile } : {}),
      ...(config.tls.keyFile ? { keyFile: config.tls.keyFile } : {}),
      rejectUnauthorized: config.tls.rejectUnauthorized,
    } as never;
  }
  return connect(options);
}
