import { resolve } from 'node:path';
import { type CacheManager, openCacheManager } from '@sluice/cache';
import type { AliasRedirected, EventPublisher, Logger, SluiceConfig, SluiceEvent } from '@sluice/core';
import { startEndpointPipeline } from '@sluice/pipeline';
import { EndpointManager } from './endpoints.js';
import { retireRemovedEndpoints } from './removed-endpoints.js';
import { dropRemovedEndpointSlots } from './replication-slots.js';

/** The serving plane of this host: its LMDB caches and the endpoint pipelines that fill them. */
export interface ServingPlane {
  caches: CacheManager;
  endpoints: EndpointManager;
  /** Calls `listener` on every alias switch of this host (as published); returns the unsubscribe. */
  onSwitch(listener: (event: AliasRedirected) => void): () => void;
  close(): Promise<void>;
}

/**
 * A publisher that stamps `host` on every `AliasRedirected`: the alias table moved is this host's (caches and
 * alias versions are per host), whatever built the event. api-servers of this host act on these only.
 *
 * @example
 * ```ts
 * const events = withHost(backplane, config.node.id);
 * ```
 */
export function withHost(publisher: EventPublisher, host: string): EventPublisher {
  return {
    publish: (event: SluiceEvent) =>
      publisher.publish(event.type === 'AliasRedirected' ? { ...event, host } : event),
  };
}

/**
 * Opens the host's caches under `dataDir` (the root the api-servers of this host read) and starts one
 * pipeline per configured endpoint (alias exists → resume into its cache or rebuild blue/green; else create
 * cache + alias) after retiring the aliases of endpoints no longer configured, publishing `AliasRedirected` through `events`, stamped with this host (`node.id`). Retired generations are garbage-collected
 * after `cache.gcGraceMs`.
 *
 * @example
 * ```ts
 * const serving = await openServingPlane(config, { events: backplane, logger, cwd: process.cwd() });
 * console.log(await serving.endpoints.status());
 * await serving.close();
 * ```
 */
export async function openServingPlane(
  config: SluiceConfig,
  context: { events: EventPublisher; logger: Logger; cwd: string },
): Promise<ServingPlane> {
  const caches = await openCacheManager(resolve(context.cwd, config.dataDir), {
    gcGraceMs: config.cache.gcGraceMs,
    scanCap: config.cache.scanCap,
    deferIndexesFrom: config.cache.deferIndexesFrom,
    stagedInMemory: config.cache.stagedInMemory,
    changes: config.cache.changes,
    logger: context.logger,
  });
  const switchListeners = new Set<(event: AliasRedirected) => void>();
  const published = withHost(context.events, config.node.id);
  // The alias has moved when its event is published: tell this process's watchers (the console's stream) too.
  const events: EventPublisher = {
    publish: (event) => {
      if (event.type === 'AliasRedirected')
        for (const listener of switchListeners) {
          try {
            listener(event);
          } catch (err) {
            context.logger.warn({ err }, 'a switch listener failed');
          }
        }
      return published.publish(event);
    },
  };
  let endpoints: EndpointManager;
  try {
    // Before the pipelines start: an endpoint gone from the configuration must not stay served, stale.
    await retireRemovedEndpoints(caches, config, context.logger);
    endpoints = await EndpointManager.start(config.endpoints, {
      caches,
      logger: context.logger,
      startPipeline: (endpoint) =>
        startEndpointPipeline(endpoint, {
          caches,
          events,
          connections: config.connections,
          baseDir: context.cwd,
          logger: context.logger,
          commitEveryRecords: config.pipeline.commitEveryRecords,
          commitEveryMs: config.pipeline.commitEveryMs,
          // Replication slot and publication names derive from it: stable across restarts of this node.
          nodeId: config.node.id,
          ...(config.nats !== undefined ? { nats: config.nats } : {}),
        }),
    });
  } catch (err) {
    await caches.close();
    throw err;
  }
  // A removed endpoint's slot would keep WAL until the disk fills: drop the ones this node created (in the
  // background: an unreachable database must not delay serving the others).
  const sweepAbort = new AbortController();
  const slotSweep = dropRemovedEndpointSlots(config, context.logger, { signal: sweepAbort.signal }).catch(
    (err) => context.logger.warn({ err }, 'cannot drop the replication slots of removed endpoints'),
  );
  const gcEveryMs = Math.min(Math.max(config.cache.gcGraceMs, 1_000), 60_000);
  const gcTimer = setInterval(() => {
    caches.gc().then(
      (removed) => {
        if (removed.length > 0)
          context.logger.info({ removed }, 'garbage-collected retired cache generations');
      },
      (err) => context.logger.warn({ err }, 'cache garbage collection failed'),
    );
  }, gcEveryMs);
  gcTimer.unref();
  return {
    caches,
    endpoints,
    onSwitch(listener) {
      switchListeners.add(listener);
      return () => switchListeners.delete(listener);
    },
    async close() {
      clearInterval(gcTimer);
      sweepAbort.abort();
      await slotSweep;
      await endpoints.stop();
      await caches.close();
    },
  };
}
