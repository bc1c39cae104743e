import { EndpointPhase } from '@sluice/core';
import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';

/**
 * What a node reports about its endpoints when metrics are scraped: every configured endpoint's phase, and the
 * counters of its pipeline (absent while it does not run: retrying its start, failed).
 */
export interface PipelineSample {
  endpoint: string;
  /** Where the endpoint is, as `GET /v1/endpoints` says (`retrying` recovers by itself, `failed` waits for Rebuild). */
  phase: EndpointPhase;
  recordsRead?: number;
  recordsWritten?: number;
  rate?: number;
  lag?: number | null;
  /** Logical replication sources: WAL bytes and seconds the cache is behind what the server sent. */
  replicationLagBytes?: number | null;
  replicationLagSeconds?: number | null;
  /**
   * How old those figures are: 0 while a run streams (live); while the endpoint retries, the seconds since
   * PostgreSQL's WAL position was last read (growing while PostgreSQL is down: the figures are the last known).
   */
  replicationLagAgeSeconds?: number | null;
}

/**
 * The node's Prometheus metrics, in a registry of its own (several nodes can live in one process in tests).
 *
 * @example
 * ```ts
 * const metrics = createMetrics({ transfers: () => ({ running: 1, queued: 0 }), pipelines: () => [] });
 * metrics.submits.inc({ outcome: 'created' });
 * const text = await metrics.registry.metrics();
 * ```
 */
export function createMetrics(sources: {
  transfers: () => { running: number; queued: number; fireAndForget: number };
  pipelines: () => PipelineSample[];
}) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'sluice_node_' });
  const submits = new Counter({
    name: 'sluice_submits_total',
    help: 'Transfer submissions by outcome',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const finished = new Counter({
    name: 'sluice_transfers_finished_total',
    help: 'Transfers this node ended, by final state',
    labelNames: ['state'] as const,
    registers: [registry],
  });
  const takeovers = new Counter({
    name: 'sluice_takeovers_total',
    help: 'Transfers this node took over from a crashed owner, by trigger',
    labelNames: ['via'] as const,
    registers: [registry],
  });
  const fenced = new Counter({
    name: 'sluice_transfers_fenced_total',
    help: 'Local runs stopped because another node took the transfer over',
    registers: [registry],
  });
  new Gauge({
    name: 'sluice_transfers',
    help: 'Transfers on this node by local state',
    labelNames: ['state'] as const,
    registers: [registry],
    collect() {
      const now = sources.transfers();
      this.set({ state: 'running' }, now.running);
      this.set({ state: 'queued' }, now.queued);
      this.set({ state: 'fire_and_forget' }, now.fireAndForget);
    },
  });
  new Gauge({
    name: 'sluice_endpoint_phase',
    help: 'Where each endpoint is: 1 for its current phase, 0 for the others (retrying recovers by itself; failed waits for an operator)',
    labelNames: ['endpoint', 'phase'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const sample of sources.pipelines())
        for (const phase of Object.values(EndpointPhase))
          this.set({ endpoint: sample.endpoint, phase }, sample.phase === phase ? 1 : 0);
    },
  });
  const pipelineGauge = (name: string, help: string, pick: (s: PipelineSample) => number | null) =>
    new Gauge({
      name,
      help,
      labelNames: ['endpoint'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const sample of sources.pipelines()) {
          const value = pick(sample);
          if (value !== null) this.set({ endpoint: sample.endpoint }, value);
        }
      },
    });
  pipelineGauge(
    'sluice_pipeline_records_read',
    'Records read by the endpoint pipeline',
    (s) => s.recordsRead ?? null,
  );
  pipelineGauge(
    'sluice_pipeline_records_written',
    'Records written by the endpoint pipeline',
    (s) => s.recordsWritten ?? null,
  );
  pipelineGauge('sluice_pipeline_rate', 'Endpoint pipeline records per second', (s) => s.rate ?? null);
  pipelineGauge(
    'sluice_pipeline_lag',
    "Endpoint pipeline lag behind its source, in the endpoint's lagUnit: bytes of a file not yet read, or messages of a JetStream stream",
    (s) => s.lag ?? null,
  );
  pipelineGauge(
    'sluice_replication_lag_bytes',
    "WAL bytes between PostgreSQL's current position and what the endpoint cache committed (logical replication)",
    (s) => s.replicationLagBytes ?? null,
  );
  pipelineGauge(
    'sluice_replication_lag_seconds',
    'Seconds since the oldest WAL position the endpoint cache has not caught up with was written (logical replication)',
    (s) => s.replicationLagSeconds ?? null,
  );
  pipelineGauge(
    'sluice_replication_lag_age_seconds',
    'Seconds since the replication lag figures were measured: 0 while the endpoint streams; while it retries, since PostgreSQL last answered (logical replication)',
    (s) => s.replicationLagAgeSeconds ?? null,
  );
  return { registry, submits, finished, takeovers, fenced };
}

export type NodeMetrics = ReturnType<typeof createMetrics>;
