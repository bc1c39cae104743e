/**
 * The options of the NATS backplane and their checks (made before connecting, so a bad name fails with
 * CONFIG_INVALID rather than as a NATS error). Moved out of nats-backplane.ts.
 */
import { ConfigError, type Logger, type NatsConfig } from '@sluice/core';
import type { ReconnectPolicy } from './connection-options.js';
import { defaultKvBucket, isValidBucketName } from './subjects.js';

export interface NatsBackplaneOptions {
  /** A URL, or servers plus credentials (user/pass, token, nkey seed, creds file) and TLS. */
  nats: NatsConfig;
  /** Prefix of every subject; nodes of one cluster must agree on it. */
  clusterName: string;
  /** This node's id (connection name; `by` of terminate acknowledgements). */
  nodeId: string;
  /**
   * This process's incarnation (the app-server's `OwnerIdentity.instanceId`, recorded as the owner instance of
   * every transfer it claims). Given, the backplane answers "who runs X?" and "stop X" for all this process's
   * transfers on one subscription of the instance's subject, set up once at connect, instead of subscribing (and
   * flushing) per served transfer; and it asks an owner on the subject of the instance that `whoRuns`/`terminate`
   * name (`ownerInstance`). Every node of a cluster must be configured alike: an instance-mode owner does not answer
   * on transfer subjects. Default: one subject per transfer.
   */
  instanceId?: string;
  logger?: Logger;
  /** JetStream KV bucket for the latest `AliasRedirected` per host and alias (default `sluice-aliases-<cluster>`). */
  kvBucket?: string;
  /**
   * Hear and list only this host's alias events (an api-server passes its host's `node.id`): alias versions are
   * per host, so another host's events are never delivered, compared or even received (its subjects are not
   * subscribed). Default: every host's.
   */
  aliasHost?: string;
  /** Reconnect backoff (default 50 ms doubling up to 1000 ms, with jitter); reconnection never gives up. */
  reconnect?: Partial<ReconnectPolicy>;
  /**
   * For this long after a *re*connect, "no responders" is reported as `unknown` rather than `nobody`: owners that
   * have not reconnected yet cannot answer, and a wrong "nobody" would start the transfer twice.
   * Default: twice the maximum reconnect delay plus 500 ms.
   */
  reconnectSettleMs?: number;
  /** Largest event, report or reply in bytes (default 64 KiB). */
  maxMessageBytes?: number;
  /** Upper bound of JetStream calls and of flushes (default 5000 ms). */
  operationTimeoutMs?: number;
  /**
   * How long the first connection is retried while NATS cannot be reached (refused, timed out, not resolvable),
   * logging each wait — a node started together with its NATS server (a compose file, a rebooted host) waits for it
   * instead of exiting. Errors retrying cannot fix (credentials, TLS) fail at once. Default 0: fail at once.
   */
  connectWaitMs?: number;
  /** Gives up the wait for the first connection (`connectWaitMs`) when it aborts. */
  signal?: AbortSignal;
}

/** Refuses invalid names (`CONFIG_INVALID`, naming the option) and returns the KV bucket to use. */
export function checkNatsBackplaneOptions(options: NatsBackplaneOptions): string {
  checkText(options.clusterName, 'clusterName', 128);
  if (options.instanceId !== undefined) checkText(options.instanceId, 'instanceId', 200);
  checkText(options.nodeId, 'nodeId', 256);
  if (options.aliasHost !== undefined) checkText(options.aliasHost, 'aliasHost', 512);
  const bucket = options.kvBucket ?? defaultKvBucket(options.clusterName);
  if (!isValidBucketName(bucket)) {
    throw new ConfigError(`kvBucket "${bucket}" may contain only letters, digits, "-" and "_"`, [
      { path: 'kvBucket', message: 'invalid bucket name' },
    ]);
  }
  return bucket;
}

/** A required text option: a string of 1 to `max` characters, else CONFIG_INVALID naming it. */
function checkText(value: unknown, path: string, max: number): void {
  if (typeof value !== 'string' || value.length === 0 || value.length > max)
    throw new ConfigError(`${path} must be 1 to ${max} characters`, [{ path, message: 'invalid' }]);
}
