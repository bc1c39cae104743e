import type { CacheManager } from '@sluice/cache';
import type { Logger, SluiceConfig } from '@sluice/core';

/**
 * Retires the alias of every endpoint this host's alias table serves that the configuration no longer has: an
 * api-server must not keep answering — stale, with a `sluice-position` that never moves — for an endpoint nothing
 * follows any more (its replication slot is dropped, too). Each api-server of the host notices through the alias
 * table (its version moves; they check it even while connected to NATS) and answers 404 `UNKNOWN_ENDPOINT`; the
 * endpoint's generations are retired, so garbage collection frees their disk after `cache.gcGraceMs`. Adding the
 * endpoint back later builds it from scratch.
 *
 * @returns the endpoints retired.
 *
 * @example
 * ```ts
 * await retireRemovedEndpoints(caches, config, logger);
 * ```
 */
export async function retireRemovedEndpoints(
  caches: CacheManager,
  config: Pick<SluiceConfig, 'endpoints'>,
  logger: Logger,
): Promise<string[]> {
  const configured = new Set(config.endpoints.map((endpoint) => endpoint.name));
  const retired: string[] = [];
  for (const { alias } of caches.listAliases()) {
    if (configured.has(alias)) continue;
    const outcome = await caches.retireAlias(alias);
    if (!outcome) continue;
    retired.push(alias);
    logger.info(
      { endpoint: alias, generation: outcome.from, version: outcome.version },
      'retired the alias of an endpoint no longer configured; api-servers stop serving it',
    );
  }
  return retired;
}
