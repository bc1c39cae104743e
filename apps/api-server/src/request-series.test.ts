import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { DurationHistogram, RequestCounter } from './request-series.js';

const BUCKETS = [0.0001, 0.001, 0.01, 0.1, 1];
const OBSERVED: Array<[string, string, number, number]> = [
  ['/v1/endpoints/:name/records/:key', 'items', 200, 0.00004],
  ['/v1/endpoints/:name/records/:key', 'items', 200, 0.0001],
  ['/v1/endpoints/:name/records/:key', 'items', 404, 0.0003],
  ['/v1/endpoints/:name/query', 'items', 200, 0.02],
  ['/v1/endpoints/:name/query', '', 400, 3],
  ['/v1/endpoints/:name/query', 'items', 200, 0.0099],
];

describe('request series', () => {
  it('render exactly as prom-client renders the same observations', async () => {
    const ours = new Registry();
    const counter = new RequestCounter({ name: 't_requests_total', help: 'requests', registry: ours });
    const histogram = new DurationHistogram({
      name: 't_duration_seconds',
      help: 'latency',
      buckets: BUCKETS,
      registry: ours,
    });
    const reference = new Registry();
    const refCounter = new Counter({
      name: 't_requests_total',
      help: 'requests',
      labelNames: ['route', 'endpoint', 'status'],
      registers: [reference],
    });
    const refHistogram = new Histogram({
      name: 't_duration_seconds',
      help: 'latency',
      labelNames: ['route', 'endpoint'],
      buckets: BUCKETS,
      registers: [reference],
    });
    for (const [route, endpoint, status, seconds] of OBSERVED) {
      counter.series(route, endpoint, status)();
      histogram.series(route, endpoint)(seconds);
      refCounter.inc({ route, endpoint, status: String(status) });
      refHistogram.observe({ route, endpoint }, seconds);
    }
    expect(await ours.metrics()).toBe(await reference.metrics());
    expect(counter.value('/v1/endpoints/:name/records/:key', 'items', 200)).toBe(2);

    // A scrape does not consume the series: the next one reports the totals again, plus what came since.
    counter.series('/v1/endpoints/:name/query', 'items', 200)();
    histogram.series('/v1/endpoints/:name/query', 'items')(0.5);
    refCounter.inc({ route: '/v1/endpoints/:name/query', endpoint: 'items', status: '200' });
    refHistogram.observe({ route: '/v1/endpoints/:name/query', endpoint: 'items' }, 0.5);
    expect(await ours.metrics()).toBe(await reference.metrics());

    ours.resetMetrics();
    reference.resetMetrics();
    expect(
      (await ours.getSingleMetricAsString('t_duration_seconds'))
        .split('\n')
        .filter((l) => l.includes('_count')),
    ).toEqual(
      (await reference.getSingleMetricAsString('t_duration_seconds'))
        .split('\n')
        .filter((l) => l.includes('_count')),
    );
  });
});
