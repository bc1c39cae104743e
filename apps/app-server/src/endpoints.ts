import {
  type BuildProgress,
  type CacheCatalog,
  type EndpointConfig,
  type EndpointPipeline,
  type EndpointStatus,
  type GenerationsView,
  type Logger,
  type ReplicationStatus,
  type SwitchOutcome,
  UnknownEndpointError,
} from '@sluice/core';
import { generationsView } from './generations.js';
import type { PipelineSample } from './metrics.js';

export type { BuildProgress, EndpointStatus, ReplicationStatus, SwitchOutcome };

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
  readonly #pipelines = new Map<string, EndpointPipeline>();
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
      startPipeline: (endpoint: EndpointConfig) => Promise<EndpointPipeline>;
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
          held: null,
          building: null,
          error: this.#failures.get(endpoint.name) ?? null,
          badRecords: { count: 0, last: null },
          replication: null,
        });
        continue;
      }
      const status = pipeline.status();
      const info = status.servingCache ? await this.#caches.info(status.servingCache) : null;
      const records = info?.recordCount ?? null;
      let building: BuildProgress | null = null;
      if (status.buildingCache && !status.held) {
        const built = (await this.#caches.info(status.buildingCache))?.recordCount ?? 0;
        building = {
          cache: status.buildingCache,
          records: built,
          expected: records,
          ratio: records ? Math.min(1, built / records) : null,
        };
      }
      out.push({
        name: endpoint.name,
        alias: status.alias,
        servingCache: status.servingCache,
        buildingCache: status.buildingCache,
        checkpoint: status.checkpoint,
        phase: status.held ? 'held' : status.progress.phase,
        records,
        lag: status.progress.lag,
        rate: status.progress.rate,
        decision: pipeline.decision,
        held: status.held,
        building,
        error: status.error,
        badRecords: status.badRecords,
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
    await this.#pipeline(name).rebuild();
  }

  /** Switches the endpoint's alias to its held generation (`NOTHING_TO_PROMOTE` when none is held). */
  async promote(name: string): Promise<SwitchOutcome> {
    return this.#pipeline(name).promote();
  }

  /** Points the alias back at the previous retained generation (or `to`), continuing it from its checkpoint. */
  async rollback(name: string, to?: string): Promise<SwitchOutcome> {
    return this.#pipeline(name).rollback(to);
  }

  /** Every retained generation of the endpoint, newest first, and its alias's switch history (newest first). */
  async generations(name: string): Promise<GenerationsView> {
    if (!this.#configs.some((endpoint) => endpoint.name === name)) throw new UnknownEndpointError(name);
    const all = (await this.#caches.list()).filter((info) => info.endpoint === name);
    const building = this.#pipelines.get(name)?.status().buildingCache ?? null;
    return {
      endpoint: name,
      generations: generationsView(all, {
        serving: this.#caches.resolveAlias(name)?.cache ?? null,
        building,
      }),
      history: this.#caches.history(name),
    };
  }

  #pipeline(name: string): EndpointPipeline {
    const pipeline = this.#pipelines.get(name);
    if (pipeline) return pipeline;
    if (this.#configs.some((endpoint) => endpoint.name === name)) {
      const failure = this.#failures.get(name);
      throw new UnknownEndpointError(
        `${name} (its pipeline is not running: ${failure?.message ?? 'stopped'})`,
      );
    }
    throw new UnknownEndpointError(name);
  }

  async stop(): Promise<void> {
    const pipelines = [...this.#pipelines.values()];
    this.#pipelines.clear();
    await Promise.allSettled(pipelines.map((pipeline) => pipeline.stop()));
  }
}
