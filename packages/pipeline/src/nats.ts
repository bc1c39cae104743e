import { connect, credsAuthenticator, type NatsConnection, nkeyAuthenticator } from '@nats-io/transport-node';
import { type NatsConfig, natsClientOptions } from '@sluice/core';

/**
 * Opens a NATS connection from a configuration entry (a URL, or servers with credentials and TLS), with the
 * options core defines for every Sluice NATS connection (the backplane's too): the same credentials, TLS,
 * reconnect and liveness settings; a bad entry or an unreadable creds or TLS file is `CONFIG_INVALID` at its key.
 *
 * @example
 * ```ts
 * const nc = await connectNats(connection.nats, `sluice-source-${handle}`);
 * ```
 */
export async function connectNats(config: NatsConfig, name = 'sluice-pipeline'): Promise<NatsConnection> {
  return connect(
    natsClientOptions(config, { name, authenticators: { nkeyAuthenticator, credsAuthenticator } }),
  );
}
