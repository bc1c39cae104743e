import { isSqliteStore, type SluiceConfig } from '@sluice/core';

/** Parses YAML configuration text and validates it like `loadConfig` (core's `parseConfigText`). */
export { parseConfigText } from '@sluice/core';
/**
 * The node configuration is loaded with `@sluice/http`'s `loadConfig` (the same function as the api-server's):
 * the YAML file at `configPath`, else `./sluice.yaml` when present, else the embedded defaults; environment
 * overrides applied; validated by core's schema and its cross-field rules (backplane choice, heartbeat shorter
 * than the lease). A bad file or value throws `CONFIG_INVALID` naming the exact field and the reason.
 *
 * @example
 * ```ts
 * const { config, warnings } = loadConfig({ configPath: 'sluice.yaml', env: process.env });
 * console.log(config.node.id, config.store);
 * ```
 */
export { loadConfig } from '@sluice/http';

/** Which backplane a configuration selects: NATS when configured, else single-node on SQLite, else direct. */
export function backplaneKind(config: SluiceConfig): 'nats' | 'single' | 'direct' {
  const strategy = config.backplane.strategy;
  if (strategy !== 'auto') return strategy;
  if (config.nats !== undefined) return 'nats';
  return isSqliteStore(config.store) ? 'single' : 'direct';
}
