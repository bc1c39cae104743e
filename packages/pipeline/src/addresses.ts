import { isAbsolute, resolve } from 'node:path';
import {
  type ConnectionConfig,
  type DestinationAddress,
  type FieldType,
  keyFields,
  type NatsConfig,
  postgresCapture,
  type SourceAddress,
  UnknownConnectionError,
  ValidationError,
  type WritableCacheCatalog,
} from '@sluice/core';
import { ownField } from './own.js';
import { createEndpointTransferSink } from './sinks/cache.js';
import { createFileSink } from './sinks/file.js';
import { createJetStreamSink } from './sinks/jetstream.js';
import { createPostgresSink } from './sinks/postgres.js';
import { createFileSource } from './sources/file.js';
import { createJetStreamSource } from './sources/jetstream.js';
import { createPostgresSource } from './sources/postgres.js';
import { defaultReplicationName, transferReplicationName } from './sources/replication/setup.js';
import { createReplicationSource, type ReplicationSourceOptions } from './sources/replication/source.js';
import type { PipelineSink, PipelineSource, SinkFence } from './types.js';

export interface ConnectionContext {
  connections: Record<string, ConnectionConfig>;
  /** NATS used by JetStream addresses that name no connection (the node's `nats:` setting). */
  nats?: NatsConfig;
  /** Relative file paths resolve against this directory. */
  baseDir?: string;
  /** This node's id: default replication slot and publication names derive from it (stable across restarts). */
  nodeId?: string;
  /** Tuning of replication sources (tests shorten the keepalive). */
  replication?: Pick<ReplicationSourceOptions, 'keepaliveMs' | 'highWater' | 'slotWaitMs'>;
}

/** The URL of the PostgreSQL connection `name` of the node's configuration (`UNKNOWN_CONNECTION` if none). */
export function postgresUrl(ctx: ConnectionContext, name: string): string {
  const connection = ownField(ctx.connections, name);
  if (connection?.type !== 'postgres') throw new UnknownConnectionError(name);
  return connection.url;
}

function natsConfig(ctx: ConnectionContext, name: string | undefined): NatsConfig {
  if (name !== undefined) {
    const connection = ownField(ctx.connections, name);
    if (connection?.type !== 'nats') throw new UnknownConnectionError(name);
    return connection.nats;
  }
  if (ctx.nats !== undefined) return ctx.nats;
  const only = Object.values(ctx.connections).filter((c) => c.type === 'nats');
  if (only.length === 1 && only[0]!.type === 'nats') return only[0]!.nats;
  throw new UnknownConnectionError('(default NATS)');
}

const filePath = (ctx: ConnectionContext, path: string) =>
  isAbsolute(path) || ctx.baseDir === undefined ? path : resolve(ctx.baseDir, path);

/**
 * The `key` option of a source or sink: the address's own key fields, else `fallback` (the endpoint's key, or the
 * source's for a sink) when there is one, else none (the node's default).
 */
function keyOption(addressKey: Parameters<typeof keyFields>[0], fallback?: string[]): { key?: string[] } {
  const key = keyFields(addressKey);
  if (key.length > 0) return { key };
  return fallback ? { key: fallback } : {};
}

/** Builds the source node for an address. */
export function sourceFor(
  address: SourceAddress,
  handle: string,
  ctx: ConnectionContext,
  options: {
    fields?: Record<string, FieldType>;
    key?: string[];
    chunkBytes?: number;
    /** Who reads: an endpoint's table source replicates by default, a transfer's polls (core `postgresCapture`). */
    role?: 'endpoint' | 'transfer';
    /** A plain read of the first records (schema inference): never a replication slot. */
    sampling?: boolean;
    /**
     * The replication slot (and publication) of the generation an endpoint's source feeds, when the address names
     * none (src/endpoint/generation-slots.ts). Default: the endpoint's primary slot name.
     */
    slot?: string;
  } = {},
): PipelineSource {
  switch (address.type) {
    case 'file':
      return createFileSource({
        handle,
        path: filePath(ctx, address.path),
        format: address.format,
        ...(address.follow !== undefined ? { follow: address.follow } : {}),
        ...(options.fields ? { fields: options.fields } : {}),
        ...(options.chunkBytes ? { chunkBytes: options.chunkBytes } : {}),
      });
    case 'postgres': {
      const replicated = postgresCapture(address, options.role ?? 'transfer') === 'replication';
      if (replicated && !options.sampling) {
        // Validated by core's schema: replication reads a table.
        const table = address.table!;
        const node = ctx.nodeId ?? 'local';
        const role = options.role ?? 'transfer';
        // An endpoint's slot is its node's; a transfer's belongs to the transfer, whichever node runs it.
        const name =
          role === 'transfer'
            ? transferReplicationName(handle)
            : (options.slot ?? defaultReplicationName(node, handle));
        return createReplicationSource({
          handle,
          url: postgresUrl(ctx, address.connection),
          table,
          ...keyOption(address.key),
          // An endpoint's records are keyed by its primaryKey: deletes and key changes must carry that key.
          ...(role === 'endpoint' && options.key ? { recordKey: options.key } : {}),
          slot: address.slot ?? name,
          publication: address.publication ?? name,
          owner: { node, handle, role },
          ...(address.heartbeat !== undefined ? { heartbeat: address.heartbeat } : {}),
          ...(ctx.replication ?? {}),
        });
      }
      return createPostgresSource({
        handle,
        url: postgresUrl(ctx, address.connection),
        ...(address.table !== undefined ? { table: address.table } : {}),
        ...(address.query !== undefined ? { query: address.query } : {}),
        ...keyOption(address.key, options.key),
        ...(address.cursor !== undefined ? { cursor: address.cursor } : {}),
        // Sampling a replicated table: its fields are what the stream carries.
        ...(replicated ? { published: true } : {}),
      });
    }
    case 'jetstream':
      return createJetStreamSource({
        handle,
        nats: natsConfig(ctx, address.connection),
        stream: address.stream,
        subject: address.subject,
        ...keyOption(address.key, options.key),
      });
  }
}

/**
 * Builds the sink node of a transfer for its destination. `ctx.fence` (the run's checkpoint port) is the
 * fencing token the sink checks where its effects land; without it the sink is unfenced (epoch 0).
 */
export function sinkFor(
  address: DestinationAddress,
  handle: string,
  writerId: string,
  ctx: ConnectionContext & { caches?: WritableCacheCatalog; fence?: SinkFence; commitSize?: number },
  sourceKey: string[],
): PipelineSink {
  const fence = ctx.fence ? { fence: ctx.fence } : {};
  switch (address.type) {
    case 'file':
      return createFileSink({
        handle,
        path: filePath(ctx, address.path),
        format: address.format,
        writerId,
        ...fence,
      });
    case 'postgres': {
      if (address.table === undefined)
        throw new ValidationError('A PostgreSQL destination needs a table', [
          { path: 'destination.table', message: 'required for a destination' },
        ]);
      return createPostgresSink({
        handle,
        url: postgresUrl(ctx, address.connection),
        table: address.table,
        writerId,
        ...fence,
        ...keyOption(address.key),
      });
    }
    case 'jetstream':
      return createJetStreamSink({
        handle,
        nats: natsConfig(ctx, address.connection),
        stream: address.stream,
        subject: address.subject,
        writerId,
        ...fence,
        ...keyOption(address.key, sourceKey.length > 0 ? sourceKey : undefined),
      });
    case 'endpoint':
      if (!ctx.caches)
        throw new ValidationError('This node has no caches for an endpoint destination', [
          { path: 'destination.endpoint', message: 'no cache manager' },
        ]);
      return createEndpointTransferSink({
        handle,
        endpoint: address.endpoint,
        caches: ctx.caches,
        writerId,
        ...fence,
        ...(ctx.commitSize !== undefined ? { commitSize: ctx.commitSize } : {}),
      });
  }
}
