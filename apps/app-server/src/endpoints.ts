import {
  type EndpointConfig,
  type Logger,
  type PipelineCheckpoint,
  type PipelineProgress,
  UnknownEndpointError,
} from '@sluice/core';
import type { PipelineSample } from './metrics.js';

/** What the manager needs of the cache manager (`@sluice/cache`'s `CacheManager`). */
export interface CacheCatalog {
  resolveAlias(alias: string): { cache: string } | null;
  info(name: string): Promise<{ recordCount: number } | null>;
}

/** What the manager needs of a running endpoint pipeline (`@sluice/pipeline`'s `EndpointPipeline`). */
export interface EndpointPipelineHandle {
  readonly decision: { decision: string; reason: string };
  status(): {
    alias: string;
    servingCache: string | null;
    buildingCache: string | null;
    checkpoint: PipelineCheckpoint | null;
    progress: PipelineProgress;
    replication?: ReplicationStatus | null;
  };
  rebuild(): Promise<void>;
  stop(): Promise<void>;
}

/** A logical replication source's slot, committed LSN and lag (bytes of WAL, seconds). */
export interface ReplicationStatus {
  slot: string;
  committedLsn: string | null;
  lagBytes: number | null;
  lagSeconds: number | null;
}

/** One endpoint as `GET /v1/endpoints` reports it. */
export interface EndpointStatus {
  name: string;
  alias: string;
  servingCache: string | null;
  buildingCache: string | null;
  checkpoint: PipelineCheckpoint | null;
  phase: string;
  records: number | null;
  lag: number | null;
  rate: number;
  decision: { decision: string; reason: string } | null;
  error: { code: string; message: string } | null;
  /** Set for endpoints fed by PostgreSQL logical replication. */
  replication: ReplicationStatus | null;
}

/**
 * The serving plane of this host: one pipeline per configured endpoint, started with the node (alias exists →
 * open its cache; else create cache + alias, as the pipeline package decides), stopped with it.
 *
 * @example
 * ```ts
 * const endpoints = await EndpointManager.start(config.endpoints, { caches, startPipeline, logger });
 * await endpoints.rebuild('items');
 * ```
 */
export class EndpointManager {
  readonly #pipelines = new Map<string, EndpointPipelineHandle>();
  readonly #failures = new Map<string, { code: string; message: string }>();
  readonly #caches: CacheCatalog;
  readonly #configs: EndpointConfig[];

  private constructor(caches: CacheCatalog, configs: EndpointConfig[]) {
    this.#caches = caches;
    this.#configs = configs;
  }

  static async start(
    endpoints: EndpointConfig[],
    context: {
      caches: CacheCatalog;
      startPipeline: (endpoint: EndpointConfig) => Promise<EndpointPipelineHandle>;
      logger: Logger;
    },
  ): Promise<EndpointManager> {
    const manager = new EndpointManager(context.caches, endpoints);
    for (const endpoint of endpoints) {
      try {
        const pipeline = await context.startPipeline(endpoint);
        manager.#pipelines.set(endpoint.name, pipeline);
        context.logger.info(
          { endpoint: endpoint.name, decision: pipeline.decision },
          'endpoint pipeline started',
        );
      } catch (err) {
        const error = err as { code?: string; message?: string };
        manager.#failures.set(endpoint.name, {
          code: error.code ?? 'INTERNAL',
          message: error.message ?? String(err),
        });
        context.logger.error({ endpoint: endpoint.name, err }, 'endpoint pipeline failed to start');
      }
    }
    return manager;
  }

  /** Names of the configured endpoints. */
  names(): string[] {
    return this.#configs.map((endpoint) => endpoint.name);
  }

  async status(): Promise<EndpointStatus[]> {
    const out: EndpointStatus[] = [];
    for (const endpoint of this.#configs) {
      const pipeline = this.#pipelines.get(endpoint.name);
      if (!pipeline) {
        out.push({
          name: endpoint.name,
          alias: endpoint.name,
          servingCache: this.#caches.resolveAlias(endpoint.name)?.cache ?? null,
          buildingCache: null,
          checkpoint: null,
          phase: 'failed',
          records: null,
          lag: null,
          rate: 0,
          decision: null,
          error: this.#failures.get(endpoint.name) ?? null,
          replication: null,
        });
        continue;
      }
      const status = pipeline.status();
      const info = status.servingCache ? await this.#caches.info(status.servingCache) : null;
      out.push({
        name: endpoint.name,
        alias: status.alias,
        servingCache: status.servingCache,
        buildingCache: status.buildingCache,
        checkpoint: status.checkpoint,
        phase: status.progress.phase,
        records: info?.recordCount ?? null,
        lag: status.progress.lag,
        rate: status.progress.rate,
        decision: pipeline.decision,
        error: null,
        replication: status.replication ?? null,
      });
    }
    return out;
  }

  /** Samples for the metrics endpoint (synchronous: read from the pipelines' progress). */
  samples(): PipelineSample[] {
    return [...this.#pipelines.entries()].map(([endpoint, pipeline]) => {
      const status = pipeline.status();
      const progress = status.progress;
      return {
        endpoint,
        recordsRead: progress.recordsRead,
        recordsWritten: progress.recordsWritten,
        rate: progress.rate,
        lag: progress.lag,
        replicationLagBytes: status.replication?.lagBytes ?? null,
        replicationLagSeconds: status.replication?.lagSeconds ?? null,
      };
    });
  }

  /** Forces a blue/green rebuild of one endpoint. */
  async rebuild(name: string): Promise<void> {
    const pipeline = this.#pipelines.get(name);
    if (!pipeline) {
      if (this.#configs.some((endpoint) => endpoint.name === name)) {
        const failure = this.#failures.get(name);
        throw new UnknownEndpointError(
          `${name} (its pipeline is not running: ${failure?.message ?? 'stopped'})`,
        );
      }
      throw new UnknownEndpointError(name);
    }
    await pipeline.rebuild();
  }

  async stop(): Promise<void> {
    const pipelines = [...this.#pipelines.values()];
    this.#pipelines.clear();
    await Promise.allSettled(pipelines.map((pipeline) => pipeline.stop()));
  }
}
