import { type EndpointConfig, type FieldType, postgresCapture } from '@sluice/core';
import { type ConnectionContext, postgresUrl, sourceFor } from '../addresses.js';
import { ownField, setOwnField } from '../own.js';
import { filterProcessor, selectProcessor } from '../processors.js';
import { isReplicationSource } from '../sources/replication/status.js';
import type { PipelineProcessor, SourceBranch } from '../types.js';
import { type EndpointSlotNames, endpointSlotNames } from './generation-slots.js';

/** What the shape of an endpoint's DAG needs from the pipeline's context. */
export interface ShapeContext extends ConnectionContext {
  /** Read size of file sources (tests use small reads to stop mid-file). */
  fileChunkBytes?: number;
}

/**
 * An endpoint's DAG as its configuration defines it: the processors (filter, then select) and how to build its
 * source branch. Node handles derive from the endpoint's name, so checkpoints stay comparable across restarts.
 */
export interface EndpointShape {
  readonly endpoint: EndpointConfig;
  readonly name: string;
  readonly processors: readonly PipelineProcessor[];
  /** A CSV file source: its columns are typed by the schema rather than by JSON. */
  readonly isCsv: boolean;
  /**
   * A new source branch; `csvFields` types a CSV source's columns; `sampling` reads without a replication slot;
   * `fields`, the cache schema's field types, lets the filter compare `timestamp` fields as instants; `slot`, the
   * replication slot of the generation it feeds (one of {@link EndpointShape.slotNames}).
   */
  branch(
    csvFields?: Record<string, FieldType>,
    sampling?: boolean,
    fields?: Readonly<Record<string, FieldType>>,
    slot?: string,
  ): SourceBranch;
  /**
   * A replication source with a slot per generation: its two slot names and its database. Null for any other source
   * (a file, JetStream or polled source, or a replication source whose `slot` is configured: one slot, one reader),
   * which feeds one generation at a time.
   */
  readonly slotNames: (EndpointSlotNames & { url: string }) | null;
  /** The replication slots of the branches open now (made and not yet closed): never swept. */
  openSlots(): ReadonlySet<string>;
  /** The source's name of a cache field (the inverse of a `select` rename). */
  sourceName(field: string): string;
  /** Cache field types keyed by the source's column names (what a CSV source is typed with). */
  csvFieldsOf(fields: Record<string, FieldType>): Record<string, FieldType>;
}

/**
 * Builds the shape of an endpoint's DAG.
 *
 * @example
 * ```ts
 * const shape = endpointShape(endpoint, { connections: config.connections });
 * const branch = shape.branch(); // { source, processors }
 * ```
 */
export function endpointShape(endpoint: EndpointConfig, ctx: ShapeContext): EndpointShape {
  const name = endpoint.name;
  const connections: ConnectionContext = {
    connections: ctx.connections,
    ...(ctx.nats !== undefined ? { nats: ctx.nats } : {}),
    ...(ctx.baseDir !== undefined ? { baseDir: ctx.baseDir } : {}),
    ...(ctx.nodeId !== undefined ? { nodeId: ctx.nodeId } : {}),
    ...(ctx.replication !== undefined ? { replication: ctx.replication } : {}),
  };
  const renames: Record<string, string> =
    endpoint.select && !Array.isArray(endpoint.select) ? endpoint.select : {};
  const sourceName = (field: string) => ownField(renames, field) ?? field;
  const sourceKey = endpoint.primaryKey.map(sourceName);
  /** The filter (then select); `timestamps`: the source names of the fields typed `timestamp`. */
  const processorsFor = (timestamps: readonly string[]): PipelineProcessor[] => {
    const out: PipelineProcessor[] = [];
    if (endpoint.filter) out.push(filterProcessor(`${name}.filter`, endpoint.filter, sourceKey, timestamps));
    if (endpoint.select) out.push(selectProcessor(`${name}.select`, endpoint.select));
    return out;
  };
  const processors = processorsFor([]);
  const timestampSources = (fields: Readonly<Record<string, FieldType>>) =>
    Object.entries(fields)
      .filter(([, type]) => type === 'timestamp')
      .map(([field]) => sourceName(field));
  const handle = `${name}.source`;
  const source = endpoint.source;
  const slotNames =
    source.type === 'postgres' &&
    postgresCapture(source, 'endpoint') === 'replication' &&
    source.slot === undefined
      ? {
          ...endpointSlotNames(ctx.nodeId ?? 'local', handle),
          url: postgresUrl(connections, source.connection),
        }
      : null;
  /** Slot → how many open branches read it. */
  const open = new Map<string, number>();
  return {
    endpoint,
    name,
    processors,
    isCsv: endpoint.source.type === 'file' && endpoint.source.format === 'csv',
    branch: (csvFields, sampling = false, fields, slot) => {
      const built = sourceFor(endpoint.source, handle, connections, {
        ...(csvFields ? { fields: csvFields } : {}),
        key: sourceKey,
        ...(ctx.fileChunkBytes ? { chunkBytes: ctx.fileChunkBytes } : {}),
        role: 'endpoint',
        sampling,
        ...(slot !== undefined && slotNames !== null ? { slot } : {}),
      });
      if (isReplicationSource(built)) {
        const read = built.slot;
        open.set(read, (open.get(read) ?? 0) + 1);
        const close = built.close.bind(built);
        let closed = false;
        built.close = async () => {
          if (!closed) {
            closed = true;
            const left = (open.get(read) ?? 1) - 1;
            if (left > 0) open.set(read, left);
            else open.delete(read);
          }
          await close();
        };
      }
      return {
        source: built,
        processors: fields === undefined ? processors : processorsFor(timestampSources(fields)),
      };
    },
    slotNames,
    openSlots: () => new Set(open.keys()),
    sourceName,
    csvFieldsOf: (fields) => {
      const out: Record<string, FieldType> = {};
      for (const [field, type] of Object.entries(fields)) setOwnField(out, sourceName(field), type);
      return out;
    },
  };
}
