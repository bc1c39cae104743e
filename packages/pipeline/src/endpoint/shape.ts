import type { EndpointConfig, FieldType } from '@sluice/core';
import { type ConnectionContext, sourceFor } from '../addresses.js';
import { ownField, setOwnField } from '../own.js';
import { filterProcessor, selectProcessor } from '../processors.js';
import type { PipelineProcessor, SourceBranch } from '../types.js';

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
   * `fields`, the cache schema's field types, lets the filter compare `timestamp` fields as instants.
   */
  branch(
    csvFields?: Record<string, FieldType>,
    sampling?: boolean,
    fields?: Readonly<Record<string, FieldType>>,
  ): SourceBranch;
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
  return {
    endpoint,
    name,
    processors,
    isCsv: endpoint.source.type === 'file' && endpoint.source.format === 'csv',
    branch: (csvFields, sampling = false, fields) => ({
      source: sourceFor(endpoint.source, `${name}.source`, connections, {
        ...(csvFields ? { fields: csvFields } : {}),
        key: sourceKey,
        ...(ctx.fileChunkBytes ? { chunkBytes: ctx.fileChunkBytes } : {}),
        role: 'endpoint',
        sampling,
      }),
      processors: fields === undefined ? processors : processorsFor(timestampSources(fields)),
    }),
    sourceName,
    csvFieldsOf: (fields) => {
      const out: Record<string, FieldType> = {};
      for (const [field, type] of Object.entries(fields)) setOwnField(out, sourceName(field), type);
      return out;
    },
  };
}
