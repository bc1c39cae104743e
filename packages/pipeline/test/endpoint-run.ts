/**
 * What the endpoint child processes in `fixtures/` share: start one endpoint pipeline and print the lines their
 * tests wait for — `EPOCH <n>` after each commit, `DECISION <decision> <reason>` once started, and
 * `SERVING <cache>` once the alias points at a complete generation.
 */
import type { EndpointPipeline } from '@sluice/core';
import { type EndpointContext, startEndpointPipeline } from '../src/endpoint.js';

/**
 * Starts `endpoint` with `ctx` (progress reported as `EPOCH` lines), prints its `DECISION`, waits until it serves
 * (at most 120 s) and prints `SERVING`; returns the running pipeline.
 *
 * @example
 * ```ts
 * const pipeline = await startReportingEndpoint(input.endpoint, { caches, events, connections: {} });
 * await pipeline.stop();
 * ```
 */
export async function startReportingEndpoint(
  endpoint: Parameters<typeof startEndpointPipeline>[0],
  ctx: Omit<EndpointContext, 'onProgress'>,
): Promise<EndpointPipeline> {
  let epoch = -1;
  const pipeline = await startEndpointPipeline(endpoint, {
    ...ctx,
    onProgress: (p) => {
      if (p.epoch !== epoch) {
        epoch = p.epoch;
        process.stdout.write(`EPOCH ${epoch}\n`);
      }
    },
  });
  process.stdout.write(`DECISION ${pipeline.decision.decision} ${pipeline.decision.reason}\n`);
  const cache = await pipeline.whenServing({ timeoutMs: 120_000 });
  process.stdout.write(`SERVING ${cache}\n`);
  return pipeline;
}
