import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { DurationHistogram, RequestCounter } from './request-series.js';

/** The api-server's Prometheus metrics, on a registry of its own (several servers can share a process). */
export interface ApiMetrics {
  readonly registry: Registry;
  /** Requests answered (request-metrics.ts records them; see request-series.ts for why not a prom-client child). */
  readonly requests: RequestCounter;
  readonly duration: DurationHistogram;
  readonly switches: Counter<'endpoint' | 'reason'>;
  readonly switchFailures: Counter<'endpoint'>;
  readonly generationsOpen: Gauge;
  readonly endpoints: Gauge;
  readonly backplaneConnected: Gauge;
  /** Connects the gauges read at scrape time to their sources. */
  observe(sources: { endpoints: () => number; generationsOpen: () => number }): void;
}

/**
 * Creates the metrics: `sluice_api_requests_total{route,endpoint,status}`,
 * `sluice_api_request_duration_seconds{route,endpoint}`, `sluice_api_switches_total{endpoint,reason}`,
 * `sluice_api_switch_failures_total{endpoint}`, `sluice_api_endpoints`, `sluice_api_generations_open`,
 * `sluice_api_backplane_connected`, plus the default process metrics.
 *
 * @example
 * ```ts
 * const metrics = createMetrics();
 * metrics.switches.inc({ endpoint: 'items', reason: 'event' });
 * ```
 */
export function createMetrics(options: { defaultMetrics?: boolean } = {}): ApiMetrics {
  const registry = new Registry();
  const sources = { endpoints: () => 0, generationsOpen: () => 0 };
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'sluice_api_' });
  return {
    registry,
    requests: new RequestCounter({
      name: 'sluice_api_requests_total',
      help: 'HTTP requests answered, by route, endpoint and status code',
      registry,
    }),
    duration: new DurationHistogram({
      name: 'sluice_api_request_duration_seconds',
      help: 'HTTP request latency, by route and endpoint',
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registry,
    }),
    switches: new Counter({
      name: 'sluice_api_switches_total',
      help: 'Cache generation switches (an alias moved and this server now answers from the new cache)',
      labelNames: ['endpoint', 'reason'],
      registers: [registry],
    }),
    switchFailures: new Counter({
      name: 'sluice_api_switch_failures_total',
      help: 'Failed attempts to open the cache an alias points to (retried)',
      labelNames: ['endpoint'],
      registers: [registry],
    }),
    generationsOpen: new Gauge({
      name: 'sluice_api_generations_open',
      help: 'Cache generations open for reading (serving + draining)',
      registers: [registry],
      collect() {
        this.set(sources.generationsOpen());
      },
    }),
    endpoints: new Gauge({
      name: 'sluice_api_endpoints',
      help: 'Endpoints served',
      registers: [registry],
      collect() {
        this.set(sources.endpoints());
      },
    }),
    backplaneConnected: new Gauge({
      name: 'sluice_api_backplane_connected',
      help: '1 while the alias-event backplane is connected, 0 otherwise (or without one)',
      registers: [registry],
    }),
    observe(next) {
      sources.endpoints = next.endpoints;
      sources.generationsOpen = next.generationsOpen;
    },
  };
}
