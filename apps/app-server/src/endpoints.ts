import { setTimeout as delay } from 'node:timers/promises';
import {
  type BuildProgress,
  type CacheCatalog,
  type EndpointConfig,
  EndpointNotRunningError,
  type EndpointPipeline,
  type EndpointStatus,
  EndpointStoppedError,
  type GenerationsView,
  type Logger,
  type ReplicationStatus,
  type SwitchOutcome,
  UnknownEndpointError,
} from '@sluice/core';
import { generationsView } from './generations.js';
import type { PipelineSample } from './metrics.js';

export type { BuildProgress, EndpointStatus, ReplicationStatus, SwitchOutcome };

/** Starts the pipeline of one configured endpoint (throws why it cannot run: a misconfigured source, say). */
export type StartPipeline = (endpoint: EndpointConfig) => Promise<EndpointPipeline>;

/** What an endpoint's failed start is remembered as: its error code and message. */
interface StartFailure {
  code: string;
  message: string;
  /** The error says a retry may succeed (a lost connection): the manager retries by itself. */
  retryable: boolean;
}

/** The first wait before a start that failed for a retryable reason is tried again; doubled up to the maximum. */
export const START_RETRY_MS = 1_000;
export const START_RETRY_MAX_MS = 30_000;

/**
 * The serving plane of this host: one pipeline per configured endpoint, started with the node (alias exists →
 * open its cache; else create cache + alias, as the pipeline package decides), stopped with it. An endpoint whose
 * pipeline failed to start stays listed (`phase: failed` with its error); `rebuild` starts it again. A failure that
 * says a retry may succeed (`details.retryable`: the source unreachable, PostgreSQL restarting) is retried by the
 * manager itself, with back-off, until the pipeline starts, fails for another reason or the node stops — a source
 * that is down at start-up is an outage to wait out, not a configuration for an operator to fix.
 *
 * @example
 * ```ts
 * const endpoints = await EndpointManager.start(config.endpoints, { caches, startPipeline, logger });
 * await endpoints.rebuild('items');
 * ```
 */
export class EndpointManager {
  readonly #pipelines = new Map<string, EndpointPipeline>();
  readonly #failures = new Map<string, StartFailure>();
  /** Starts in progress (at a retry), so two Rebuilds of a failed endpoint start one pipeline. */
  readonly #starting = new Map<string, Promise<void>>();
  /** Endpoints whose start a background loop retries (one loop each). */
  readonly #retrying = new Set<string>();
  /** Wakes the background start retries when the node stops. */
  readonly #stopping = new AbortController();
  readonly #caches: CacheCatalog;
  readonly #configs: EndpointConfig[];
  readonly #startPipeline: StartPipeline;
  readonly #logger: Logger;
  #stopped = false;

  private constructor(
    caches: CacheCatalog,
    configs: EndpointConfig[],
    startPipeline: StartPipeline,
    logger: Logger,
  ) {
    this.#caches = caches;
    this.#configs = configs;
    this.#startPipeline = startPipeline;
    this.#logger = logger;
  }

  static async start(
    endpoints: EndpointConfig[],
    context: { caches: CacheCatalog; startPipeline: StartPipeline; logger: Logger },
  ): Promise<EndpointManager> {
    const manager = new EndpointManager(context.caches, endpoints, context.startPipeline, context.logger);
    for (const endpoint of endpoints) await manager.#launch(endpoint);
    for (const endpoint of endpoints) manager.#retryLater(endpoint);
    return manager;
  }

  /**
   * While the endpoint's start failed for a retryable reason, starts it again after a back-off (in the background;
   * a Rebuild meanwhile joins or replaces a retry, never doubles it).
   */
  #retryLater(endpoint: EndpointConfig): void {
    if (!this.#failures.get(endpoint.name)?.retryable || this.#retrying.has(endpoint.name)) return;
    this.#retrying.add(endpoint.name);
    void (async () => {
      let waitMs = START_RETRY_MS;
      while (!this.#stopped && this.#failures.get(endpoint.name)?.retryable) {
        this.#logger.warn(
          { endpoint: endpoint.name, error: this.#failures.get(endpoint.name), retryInMs: waitMs },
          'endpoint pipeline could not start for now; retrying',
        );
        try {
          await delay(waitMs, undefined, { signal: this.#stopping.signal });
        } catch {
          return; // the node stops
        }
        waitMs = Math.min(waitMs * 2, START_RETRY_MAX_MS);
        if (this.#stopped || this.#pipelines.has(endpoint.name)) return;
        await this.#startOnce(endpoint);
      }
    })().finally(() => this.#retrying.delete(endpoint.name));
  }

  /** One start of a stopped endpoint, shared by whoever asks while it runs (a Rebuild, a retry). */
  #startOnce(endpoint: EndpointConfig): Promise<void> {
    let starting = this.#starting.get(endpoint.name);
    if (!starting) {
      starting = this.#launch(endpoint).finally(() => this.#starting.delete(endpoint.name));
      this.#starting.set(endpoint.name, starting);
    }
    return starting;
  }

  /** Starts one endpoint's pipeline; a failure is remembered (and shown) rather than thrown. */
  async #launch(endpoint: EndpointConfig): Promise<void> {
    try {
      const pipeline = await this.#startPipeline(endpoint);
      if (this.#stopped) {
        // The node stopped while this (retried) start ran: nobody would stop the pipeline later.
        await pipeline.stop().catch(() => undefined);
        return;
      }
      this.#pipelines.set(endpoint.name, pipeline);
      this.#failures.delete(endpoint.name);
      this.#logger.info(
        { endpoint: endpoint.name, decision: pipeline.decision },
        'endpoint pipeline started',
      );
    } catch (err) {
      const error = err as { code?: string; message?: string; details?: { retryable?: unknown } };
      this.#failures.set(endpoint.name, {
        code: error.code ?? 'INTERNAL',
        message: error.message ?? String(err),
        retryable: error.details?.retryable === true,
      });
      this.#logger.error({ endpoint: endpoint.name, err }, 'endpoint pipeline failed to start');
    }
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
          error: this.#failureOf(endpoint.name),
          badRecords: { count: 0, last: null },
          replication: null,
          follower: null,
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
        follower: status.follower ?? null,
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

  /**
   * Forces a blue/green rebuild of one endpoint. An endpoint whose pipeline failed to start is started again
   * instead (as at node start: it resumes into its cache when it can, else builds a new generation) — the retry
   * after its cause was fixed; `ENDPOINT_NOT_RUNNING` (with the new failure) when it fails again.
   *
   * @returns `restarted` when a failed endpoint's pipeline was started again, `started` for a rebuild.
   */
  async rebuild(name: string): Promise<'started' | 'restarted'> {
    const config = this.#config(name);
    const running = this.#pipelines.get(name);
    if (running) {
      await running.rebuild();
      return 'started';
    }
    if (this.#stopped) throw new EndpointStoppedError(name);
    await this.#startOnce(config);
    // A cause the operator fixed may leave the source only unreachable for now: retried from here on.
    this.#retryLater(config);
    this.#pipeline(name);
    return 'restarted';
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

  #config(name: string): EndpointConfig {
    const config = this.#configs.find((endpoint) => endpoint.name === name);
    if (!config) throw new UnknownEndpointError(name);
    return config;
  }

  /** The endpoint's running pipeline; a configured one that is not running is a 409 saying why, never a 404. */
  #pipeline(name: string): EndpointPipeline {
    this.#config(name);
    const pipeline = this.#pipelines.get(name);
    if (pipeline) return pipeline;
    if (this.#stopped) throw new EndpointStoppedError(name);
    throw new EndpointNotRunningError(
      name,
      this.#failureOf(name) ?? { code: 'INTERNAL', message: 'its pipeline did not start' },
    );
  }

  /** The failed start as it is shown: its code and message. */
  #failureOf(name: string): { code: string; message: string } | null {
    const failure = this.#failures.get(name);
    return failure ? { code: failure.code, message: failure.message } : null;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#stopping.abort();
    await Promise.allSettled(this.#starting.values());
    const pipelines = [...this.#pipelines.values()];
    this.#pipelines.clear();
    await Promise.allSettled(pipelines.map((pipeline) => pipeline.stop()));
  }
}
