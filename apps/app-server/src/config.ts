import { ConfigError, parseConfigText as parseCoreConfigText, type SluiceConfig } from '@sluice/core';
import { type LoadConfigOptions, type LoadedConfig, loadConfig as loadHostConfig } from '@sluice/http';

/**
 * Loads the node configuration the way both apps do (`@sluice/http`'s `loadConfig`: the YAML file at
 * `configPath`, else `./sluice.yaml` when present, else the embedded defaults; environment overrides; core's
 * schema), then the app-server's own rules ({@link validateNodeConfig}). A bad file or value throws
 * `CONFIG_INVALID` naming the exact field and the reason.
 *
 * @example
 * ```ts
 * const { config } = loadConfig({ configPath: 'sluice.yaml', env: process.env });
 * console.log(config.node.id, config.store);
 * ```
 */
export function loadConfig(options: Omit<LoadConfigOptions, 'validate'> = {}): LoadedConfig {
  return loadHostConfig({ ...options, validate: validateNodeConfig });
}

/**
 * Parses YAML configuration text and validates it (with environment overrides) like {@link loadConfig}.
 *
 * @example
 * ```ts
 * const config = parseConfigText('node: { id: h1, port: 7070 }', {});
 * ```
 */
export function parseConfigText(
  text: string,
  env: Record<string, string | undefined> = {},
  source = 'configuration',
): SluiceConfig {
  const config = parseCoreConfigText(text, env, source);
  validateNodeConfig(config);
  return config;
}

/**
 * The app-server's rules on top of core's schema: the backplane strategy must fit the store and NATS settings,
 * and the heartbeat must be shorter than the lease. Throws `CONFIG_INVALID` naming the field.
 *
 * @example
 * ```ts
 * validateNodeConfig(parseCoreConfigText('backplane: { strategy: nats }')); // throws: nats is required
 * ```
 */
export function validateNodeConfig(config: SluiceConfig): void {
  if (config.backplane.strategy === 'nats' && config.nats === undefined)
    throw new ConfigError('backplane.strategy "nats" needs a nats connection', [
      { path: 'nats', message: 'required when backplane.strategy is "nats"' },
    ]);
  if (config.backplane.strategy === 'single' && !config.store.startsWith('sqlite:'))
    throw new ConfigError('backplane.strategy "single" only works with an embedded SQLite store', [
      { path: 'backplane.strategy', message: '"single" needs a sqlite: store; use "direct" or "nats"' },
    ]);
  if (config.limits.heartbeatMs >= config.limits.leaseMs)
    throw new ConfigError('limits.heartbeatMs must be shorter than limits.leaseMs', [
      { path: 'limits.heartbeatMs', message: `must be less than limits.leaseMs (${config.limits.leaseMs})` },
    ]);
}

/** Which backplane a configuration selects: NATS when configured, else single-node on SQLite, else direct. */
export function backplaneKind(config: SluiceConfig): 'nats' | 'single' | 'direct' {
  const strategy = config.backplane.strategy;
  if (strategy !== 'auto') return strategy;
  if (config.nats !== undefined) return 'nats';
  return config.store.startsWith('sqlite:') ? 'single' : 'direct';
}
