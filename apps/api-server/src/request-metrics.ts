/**
 * Request metrics: one counter increment and one histogram observation per request, labelled by route, endpoint
 * and status. Moved out of app.ts.
 */
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { ApiMetrics } from './metrics.js';
import type { EndpointRegistry } from './registry.js';

/**
 * The `onResponse` hook that counts and times each request through `recorder`.
 *
 * @example
 * ```ts
 * app.addHook('onResponse', requestMetricsHook(requestRecorder(registry, metrics)));
 * ```
 */
export function requestMetricsHook(recorder: RequestRecorder) {
  return (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    recorder(
      request.routeOptions.url ?? '(unmatched)',
      request.sluiceEndpoint,
      reply.statusCode,
      reply.elapsedTime,
    );
    done();
  };
}

/**
 * Counts and times one answered request: its route pattern, the endpoint it named (if any), its status and how
 * long it took in ms. Shared by the `onResponse` hook and the lookups answered below fastify (fast-lookup.ts).
 */
export type RequestRecorder = (
  route: string,
  name: string | undefined,
  status: number,
  elapsedMs: number,
) => void;

/**
 * The recorder of one application. An endpoint name the registry does not know is recorded as '' (a label per
 * made-up name would let a client grow the series without bound).
 *
 * @example
 * ```ts
 * const record = requestRecorder(registry, metrics);
 * app.addHook('onResponse', requestMetricsHook(record));
 * ```
 */
export function requestRecorder(registry: EndpointRegistry, metrics: ApiMetrics): RequestRecorder {
  // The series' recorders, per (route, endpoint, status): one lookup, then plain additions (request-series.ts).
  const series = new Map<string, { count: () => void; observe: (seconds: number) => void }>();
  return (route, name, status, elapsedMs) => {
    const endpoint = name !== undefined && registry.has(name) ? name : '';
    const key = `${route}\u0000${endpoint}\u0000${status}`;
    let entry = series.get(key);
    if (!entry) {
      entry = {
        count: metrics.requests.series(route, endpoint, status),
        observe: metrics.duration.series(route, endpoint),
      };
      if (series.size < 10_000) series.set(key, entry);
    }
    entry.count();
    entry.observe(elapsedMs / 1000);
  };
}
