import {
  ConfigError,
  loadConfigFile,
  parseConfigText as parseCoreConfigText,
  type SluiceConfig,
} from '@sluice/core';

/**
 * Loads the node configuration with core's `loadConfigFile`: the YAML file at `path`, else `./sluice.yaml` when
 * present, else the embedded defaults; environment overrides applied; validated by core's schema plus the
 * app-server's own rules (backplane choice, heartbeat shorter than the lease). A bad file or value throws
 * `CONFIG_INVALID` naming the exact field and the reason.
 *
 * @example
 * ```ts
 * const config = await loadConfig('sluice.yaml', process.env);
 * console.log(config.node.id, config.store);
 * ```
 */
export async function loadConfig(
  path: string | undefined,
  env: Record<string, string | undefined> = process.env,
  cwd: string = process.cwd(),
): Promise<SluiceConfig> {
  const { config } = loadConfigFile({ configPath: path, env, cwd });
  assertBackplaneChoice(config);
  return config;
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
  assertBackplaneChoice(config);
  return config;
}

function assertBackplaneChoice(config: SluiceConfig): void {
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
