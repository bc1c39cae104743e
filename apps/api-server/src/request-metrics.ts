/**
 * Request metrics: one counter increment and one histogram observation per request, labelled by route, endpoint
 * and status. Moved out of app.ts.
 */
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { ApiMetrics } from './metrics.js';
import type { EndpointRegistry } from './registry.js';

/**
 * The `onResponse` hook that counts and times each request. An endpoint name the registry does not know is
 * recorded as '' (a label per made-up name would let a client grow the series without bound).
 *
 * @example
 * ```ts
 * app.addHook('onResponse', requestMetricsHook(registry, metrics));
 * ```
 */
export function requestMetricsHook(registry: EndpointRegistry, metrics: ApiMetrics) {
  // Label children are cached per (route, endpoint, status): prom-client hashes label objects otherwise.
  const series = new Map<string, { count: () => void; observe: (seconds: number) => void }>();
  return (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const route = request.routeOptions.url ?? '(unmatched)';
    const name = request.sluiceEndpoint;
    const endpoint = name !== undefined && registry.has(name) ? name : '';
    const key = `${route}\u0000${endpoint}\u0000${reply.statusCode}`;
    let entry = series.get(key);
    if (!entry) {
      const counter = metrics.requests.labels(route, endpoint, String(reply.statusCode));
      const histogram = metrics.duration.labels(route, endpoint);
      entry = { count: () => counter.inc(), observe: (seconds) => histogram.observe(seconds) };
      if (series.size < 10_000) series.set(key, entry);
    }
    entry.count();
    entry.observe(reply.elapsedTime / 1000);
    done();
  };
}
