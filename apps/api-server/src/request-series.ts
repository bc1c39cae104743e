/**
 * The request counter and duration histogram, recorded on the hot path as plain number updates and turned into
 * Prometheus series only when `/metrics` is scraped. prom-client's labelled children validate and hash their
 * label object on every `inc` / `observe` (about 1 µs per request — a quarter of a point lookup's own work:
 * docs/performance.md § Request metrics); a series here is looked up once and then only added to.
 */
import { Counter, type MetricValueWithName, type Registry } from 'prom-client';

/** Adds one to a series. */
export type CountOne = () => void;

/**
 * A counter labelled by route, endpoint and status whose series are plain numbers, copied into a prom-client
 * `Counter` when the registry is scraped (that counter is written only by this; the copy is per series, not per
 * request).
 *
 * @example
 * ```ts
 * const requests = new RequestCounter({ name: 'x_requests_total', help: '…', registry });
 * const countOk = requests.series('/v1/endpoints/:name/query', 'items', 200);
 * countOk();
 * ```
 */
export class RequestCounter {
  private readonly all = new Map<string, CountSeries>();
  /** Bumped by a reset: a recorder whose series belongs to an older epoch puts it back, zeroed. */
  private epoch = 0;

  constructor(options: { name: string; help: string; registry: Registry }) {
    const owner = this;
    const counter = new Counter({
      name: options.name,
      help: options.help,
      labelNames: ['route', 'endpoint', 'status'],
      registers: [options.registry],
      collect() {
        // The prom-client counter is a rendering of the series: rebuilt from them at each scrape.
        clearCounter.call(this);
        for (const series of owner.all.values()) if (series.n > 0) this.inc(series.labels, series.n);
      },
    });
    // registry.resetMetrics() resets the series themselves, as it would a prom-client counter's.
    counter.reset = () => {
      owner.epoch += 1;
      owner.all.clear();
      clearCounter.call(counter);
    };
  }

  /** The incrementer of one series (create once, call per request). */
  series(route: string, endpoint: string, status: number): CountOne {
    const key = `${route}\u0000${endpoint}\u0000${status}`;
    const target =
      this.all.get(key) ??
      this.revive(key, { labels: { route, endpoint, status: String(status) }, n: 0, epoch: -1 });
    return () => {
      if (target.epoch !== this.epoch) this.revive(key, target);
      target.n += 1;
    };
  }

  /** The count of one series so far (tests, diagnostics). */
  value(route: string, endpoint: string, status: number): number {
    return this.all.get(`${route}\u0000${endpoint}\u0000${status}`)?.n ?? 0;
  }

  private revive(key: string, series: CountSeries): CountSeries {
    series.n = 0;
    series.epoch = this.epoch;
    this.all.set(key, series);
    return series;
  }
}

const clearCounter = Counter.prototype.reset;

interface CountSeries {
  readonly labels: { route: string; endpoint: string; status: string };
  n: number;
  epoch: number;
}

/** One (route, endpoint) series: non-cumulative bucket counts (the last one is `+Inf`), sum and count. */
interface Series {
  readonly labels: { route: string; endpoint: string };
  readonly counts: Float64Array;
  sum: number;
  count: number;
  epoch: number;
}

/** Records one duration, in seconds, into a series. */
export type ObserveDuration = (seconds: number) => void;

/**
 * A Prometheus histogram labelled by route and endpoint that a registry renders like prom-client's own
 * (`_bucket{le,…}` cumulative, `_sum`, `_count`).
 *
 * @example
 * ```ts
 * const duration = new DurationHistogram({ name: 'x_seconds', help: '…', buckets: [0.001, 0.01], registry });
 * const observe = duration.series('/v1/endpoints/:name/query', 'items');
 * observe(0.0042);
 * ```
 */
export class DurationHistogram {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly bounds: readonly number[];
  private readonly all = new Map<string, Series>();
  /** Bumped by a reset: a recorder whose series belongs to an older epoch puts it back, zeroed. */
  private epoch = 0;

  constructor(options: { name: string; help: string; buckets: readonly number[]; registry: Registry }) {
    this.name = options.name;
    this.help = options.help;
    this.bounds = [...options.buckets].sort((a, b) => a - b);
    // prom-client's registry renders any metric whose get() returns its documented shape.
    options.registry.registerMetric(this as never);
  }

  /** The recorder of one series (create once, call per request). */
  series(route: string, endpoint: string): ObserveDuration {
    const key = `${route}\u0000${endpoint}`;
    const target =
      this.all.get(key) ??
      this.revive(key, {
        labels: { route, endpoint },
        counts: new Float64Array(this.bounds.length + 1),
        sum: 0,
        count: 0,
        epoch: -1,
      });
    const bounds = this.bounds;
    return (seconds) => {
      if (target.epoch !== this.epoch) this.revive(key, target);
      let i = 0;
      while (i < bounds.length && seconds > bounds[i]!) i++;
      target.counts[i]! += 1;
      target.sum += seconds;
      target.count += 1;
    };
  }

  /** The series as prom-client's `get()` returns a histogram's (what its registry renders). */
  async get(): Promise<{
    name: string;
    help: string;
    type: 'histogram';
    values: MetricValueWithName<string>[];
    aggregator: 'sum';
  }> {
    const values: MetricValueWithName<string>[] = [];
    const bucket = `${this.name}_bucket`;
    for (const series of this.all.values()) {
      let cumulative = 0;
      this.bounds.forEach((bound, i) => {
        cumulative += series.counts[i]!;
        values.push({ metricName: bucket, labels: { le: bound, ...series.labels }, value: cumulative });
      });
      values.push({ metricName: bucket, labels: { le: '+Inf', ...series.labels }, value: series.count });
      values.push({ metricName: `${this.name}_sum`, labels: { ...series.labels }, value: series.sum });
      values.push({ metricName: `${this.name}_count`, labels: { ...series.labels }, value: series.count });
    }
    return { name: this.name, help: this.help, type: 'histogram', values, aggregator: 'sum' };
  }

  /** Drops every series, as prom-client does (`registry.resetMetrics()`); recorders start them again, zeroed. */
  reset(): void {
    this.epoch += 1;
    this.all.clear();
  }

  private revive(key: string, series: Series): Series {
    series.counts.fill(0);
    series.sum = 0;
    series.count = 0;
    series.epoch = this.epoch;
    this.all.set(key, series);
    return series;
  }
}
