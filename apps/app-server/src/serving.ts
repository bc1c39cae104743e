// TEMPORARY (not committed): stands in until @sluice/cache lands.
import type { EventPublisher, Logger, SluiceConfig } from '@sluice/core';
import { EndpointManager } from './endpoints.js';

export interface ServingPlane {
  caches: undefined;
  endpoints: EndpointManager;
  close(): Promise<void>;
}

export async function openServingPlane(
  config: SluiceConfig,
  context: { events: EventPublisher; logger: Logger; cwd: string },
): Promise<ServingPlane> {
  const endpoints = await EndpointManager.start(config.endpoints, {
    caches: { resolveAlias: () => null, info: async () => null },
    startPipeline: async () => {
      throw new Error('endpoint pipelines are not available yet');
    },
    logger: context.logger,
  });
  return { caches: undefined, endpoints, close: () => endpoints.stop() };
}
