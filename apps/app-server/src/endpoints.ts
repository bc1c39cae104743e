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
  sourceNotReadyOf,
  sourceSettingOf,
  UnknownEndpointError,
} from '@sluice/core';
import {
  afterFailedAttempt,
  type EndpointStart,
  endpointPhase,
  moveStart,
  type StartFailure,
  StartPhase,
  shown,
} from './endpoint-start.js';
import { generationsView } from './generations.js';
import { lagUnitOf } from './lag-unit.js';
import type { PipelineSample } from './metrics.js';

export type { BuildProgress, EndpointStatus, ReplicationStatus, SwitchOutcome };

/** Starts the pipeline of one configured endpoint (throws why it cannot run: a misconfigured source, say). */
export type StartPipeline = (endpoint: EndpointConfig) => Promise<EndpointPipeline>;

/** The first wait before a start that failed for a retryable reason is tried again; doubled up to the maximum. */
export const START_RETRY_MS = 1_000;
export const START_RETRY_MAX_MS = 30_000;

/**
 * The serving plane of this host: one pipeline per configured endpoint, started with the node (alias exists →
 * open its cache; else create cache + alias, as the pipeline package decides), stopped with it. Each endpoint's start
 * is a small state machine (endpoint-start.ts): a failure that says a retry may succeed (`details.retryable`: the
 * source unreachable, PostgreSQL restarting) is retried by the manager itself, with back-off, until the pipeline
 * starts, fails for another reason or the node stops — listed meanwhile as `phase: retrying`, since a source that is
 * down at start-up is an outage to wait out, not a configuration for an operator to fix. Any other failure leaves the
 * endpoint listed as `phase: failed` with its error until `rebuild` starts it again.
 *
 * @example
 * ```ts
 * const endpoints = await EndpointManager.start(config.endpoints, { caches, startPipeline, logger });
 * await endpoints.rebuild('items');
 * ```
 */
export class EndpointManager {
  /** Where each configured endpoint's start is (every move through `moveStart`). */
  readonly #starts = new Map<string, EndpointStart>();
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
    for (const endpoint of configs) this.#starts.set(endpoint.name, { phase: StartPhase.starting });
  }

  static async start(
    endpoints: EndpointConfig[],
    context: { caches: CacheCatalog; startPipeline: StartPipeline; logger: Logger },
  ): Promise<EndpointManager> {
    const manager = new EndpointManager(context.caches, endpoints, context.startPipeline, context.logger);
    for (const endpoint of endpoints) {
      await manager.#launch(endpoint);
      manager.#retryLater(endpoint);
    }
    return manager;
  }

  /** The endpoint's start now. */
  #start(name: string): EndpointStart {
    return this.#starts.get(name) ?? { phase: StartPhase.stopped };
  }

  #move(name: string, to: EndpointStart): void {
    this.#starts.set(name, moveStart(name, this.#start(name), to));
  }

  /** The running pipeline of the endpoint, or null. */
  #running(name: string): EndpointPipeline | null {
    const start = this.#start(name);
    return start.phase === StartPhase.running ? start.pipeline : null;
  }

  /**
   * While the endpoint's start is `retrying`, starts it again after a back-off (in the background; a Rebuild
   * meanwhile joins or adds an attempt, never a second loop).
   */
  #retryLater(endpoint: EndpointConfig): void {
    const name = endpoint.name;
    if (this.#start(name).phase !== StartPhase.retrying || this.#retrying.has(name)) return;
    this.#retrying.add(name);
    void (async () => {
      let waitMs = START_RETRY_MS;
      for (let start = this.#start(name); start.phase === StartPhase.retrying; start = this.#start(name)) {
        if (this.#stopped) return;
        this.#move(name, { ...start, nextAttemptAt: Date.now() + waitMs });
        // Each attempt at debug only: the warning went out when the endpoint began to wait, or its reason changed.
        this.#logger.debug(
          { endpoint: name, error: shown(start.failure), attempts: start.attempts, retryInMs: waitMs },
          'endpoint pipeline start attempt failed; retrying',
        );
        try {
          await delay(waitMs, undefined, { signal: this.#stopping.signal });
        } catch {
          return; // the node stops
        }
        waitMs = Math.min(waitMs * 2, START_RETRY_MAX_MS);
        const due = this.#start(name);
        if (this.#stopped || due.phase !== StartPhase.retrying) return;
        this.#move(name, { ...due, nextAttemptAt: null });
        await this.#startOnce(endpoint);
      }
    })().finally(() => this.#retrying.delete(name));
  }

  /** One start of a stopped endpoint, shared by whoever asks while it runs (a Rebuild, a retry). */
  #startOnce(endpoint: EndpointConfig): Promise<void> {
    let starting = this.#starting.get(endpoint.name);
    if (!starting) {
      // A failed endpoint's Rebuild is a new start; a retrying one stays retrying until an attempt succeeds.
      if (this.#start(endpoint.name).phase === StartPhase.failed)
        this.#move(endpoint.name, { phase: StartPhase.starting });
      starting = this.#launch(endpoint).finally(() => this.#starting.delete(endpoint.name));
      this.#starting.set(endpoint.name, starting);
    }
    return starting;
  }

  /** One attempt to start the endpoint's pipeline; its failure is remembered (and shown) rather than thrown. */
  async #launch(endpoint: EndpointConfig): Promise<void> {
    const name = endpoint.name;
    try {
      const pipeline = await this.#startPipeline(endpoint);
      if (this.#stopped) {
        // The node stopped while this (retried) start ran: nobody would stop the pipeline later.
        await pipeline.stop().catch(() => undefined);
        return;
      }
      this.#move(name, { phase: StartPhase.running, pipeline });
      this.#logger.info({ endpoint: name, decision: pipeline.decision }, 'endpoint pipeline started');
    } catch (err) {
      if (this.#stopped) return;
      const failure = startFailureOf(err, this.#configs.indexOf(endpoint));
      const before = this.#start(name);
      this.#move(name, afterFailedAttempt(before, failure));
      if (!failure.retryable) {
        this.#logger.error({ endpoint: name, err }, 'endpoint pipeline failed to start');
        return;
      }
      // Once per change of state or reason, without a stack: an outage or a file not written yet is retried for as
      // long as it lasts, and a log line per attempt would bury everything else.
      if (before.phase !== StartPhase.retrying || !sameFailure(before.failure, failure))
        this.#logger.warn(
          { endpoint: name, error: shown(failure) },
          'endpoint pipeline could not start for now; retrying',
        );
    }
  }

  /** Names of the configured endpoints. */
  names(): string[] {
    return this.#configs.map((endpoint) => endpoint.name);
  }

  async status(): Promise<EndpointStatus[]> {
    const out: EndpointStatus[] = [];
    for (const endpoint of this.#configs) {
      const start = this.#start(endpoint.name);
      if (start.phase !== StartPhase.running) {
        out.push({
          name: endpoint.name,
          alias: endpoint.name,
          servingCache: this.#caches.resolveAlias(endpoint.name)?.cache ?? null,
          buildingCache: null,
          checkpoint: null,
          ...endpointPhase(start, null),
          records: null,
          lag: null,
          lagUnit: lagUnitOf(endpoint.source),
          rate: 0,
          decision: null,
          held: null,
          building: null,
          badRecords: { count: 0, last: null },
          replication: null,
          follower: null,
          slotWait: null,
        });
        continue;
      }
      const status = start.pipeline.status();
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
        ...endpointPhase(start, status),
        records,
        lag: status.progress.lag,
        lagUnit: lagUnitOf(endpoint.source),
        rate: status.progress.rate,
        decision: start.pipeline.decision,
        held: status.held,
        building,
        badRecords: status.badRecords,
        replication: status.replication ?? null,
        follower: status.follower ?? null,
        slotWait: status.slotWait ?? null,
      });
    }
    return out;
  }

  /**
   * Samples for the metrics endpoint (synchronous: read from the pipelines' progress): every configured endpoint's
   * phase, and the counters of those that run.
   */
  samples(): PipelineSample[] {
    return [...this.#starts.entries()].map(([endpoint, start]) => {
      if (start.phase !== StartPhase.running) return { endpoint, phase: endpointPhase(start, null).phase };
      const status = start.pipeline.status();
      const progress = status.progress;
      return {
        endpoint,
        phase: endpointPhase(start, status).phase,
        recordsRead: progress.recordsRead,
        recordsWritten: progress.recordsWritten,
        rate: progress.rate,
        lag: progress.lag,
        replicationLagBytes: status.replication?.lagBytes ?? null,
        replicationLagSeconds: status.replication?.lagSeconds ?? null,
        replicationLagAgeSeconds: lagAgeSeconds(status.replication),
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
    const running = this.#running(name);
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

  /**
   * Switches the endpoint's alias to its held generation (`NOTHING_TO_PROMOTE` when none is held); with `generation`,
   * only if that one is held (`GENERATION_NOT_HELD` otherwise, nothing moves).
   */
  async promote(name: string, generation?: string): Promise<SwitchOutcome> {
    return this.#pipeline(name).promote(generation);
  }

  /**
   * Points the alias back at the previous retained generation (or `to`), continuing it from its checkpoint; with
   * `from`, only while that one serves (`GENERATION_NOT_SERVING` otherwise, nothing moves).
   */
  async rollback(name: string, to?: string, from?: string): Promise<SwitchOutcome> {
    return this.#pipeline(name).rollback(to, from);
  }

  /** Every retained generation of the endpoint, newest first, and its alias's switch history (newest first). */
  async generations(name: string): Promise<GenerationsView> {
    if (!this.#configs.some((endpoint) => endpoint.name === name)) throw new UnknownEndpointError(name);
    const all = (await this.#caches.list()).filter((info) => info.endpoint === name);
    const building = this.#running(name)?.status().buildingCache ?? null;
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
    const pipeline = this.#running(name);
    if (pipeline) return pipeline;
    if (this.#stopped) throw new EndpointStoppedError(name);
    const start = this.#start(name);
    throw new EndpointNotRunningError(
      name,
      start.phase === StartPhase.retrying || start.phase === StartPhase.failed
        ? shown(start.failure)
        : { code: 'INTERNAL', message: 'its pipeline did not start' },
    );
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#stopping.abort();
    await Promise.allSettled(this.#starting.values());
    const pipelines: EndpointPipeline[] = [];
    for (const [name, start] of this.#starts) {
      if (start.phase === StartPhase.running) pipelines.push(start.pipeline);
      if (start.phase !== StartPhase.stopped) this.#move(name, { phase: StartPhase.stopped });
    }
    await Promise.allSettled(pipelines.map((pipeline) => pipeline.stop()));
  }
}

/**
 * The start failure `err` stands for, of the endpoint at `index` of the configuration's `endpoints`. A source that is
 * not ready yet (core's `SourceNotReady`: its file not written, its table not created) is waited for like an
 * unreachable one (`details.retryable`); its message names the setting — `endpoints[i].source.path`, say — and says
 * the endpoint starts by itself. Another failure about a source setting (a file it may not read) names the setting to
 * fix, then Rebuild.
 */
export function startFailureOf(err: unknown, index: number): StartFailure {
  const error = err as { code?: string; message?: string; details?: { retryable?: unknown } };
  const code = error.code ?? 'INTERNAL';
  const message = error.message ?? String(err);
  const retryable = error.details?.retryable === true;
  const setting = sourceSettingOf(err);
  if (setting === null) return { code, message, retryable };
  const key = `endpoints[${index}].source.${setting}`;
  if (sourceNotReadyOf(err) !== null)
    return {
      code,
      message: `${message}: waiting for it (${key}); the endpoint starts by itself once it is there`,
      retryable: true,
    };
  return { code, message: `${message} (${key})`, retryable };
}

const sameFailure = (a: StartFailure, b: StartFailure) => a.code === b.code && a.message === b.message;

/**
 * How old an endpoint's replication figures are (seconds): 0 while live (a run streams), the time since `observedAt`
 * while it retries, null without figures.
 */
function lagAgeSeconds(replication: ReplicationStatus | null, now = Date.now()): number | null {
  if (replication === null || replication.lagBytes === null) return null;
  if (replication.observedAt == null) return 0;
  return Math.max(0, now - Date.parse(replication.observedAt)) / 1000;
}
