import {
  isSqliteStore,
  loadConfigFile,
  parseConfigText as parseCoreConfigText,
  type SluiceConfig,
} from '@sluice/core';

/**
 * Loads the node configuration with core's `loadConfigFile`: the YAML file at `path`, else `./sluice.yaml` when
 * present, else the embedded defaults; environment overrides applied; validated by core's schema and its
 * cross-field rules (backplane choice, heartbeat shorter than the lease). A bad file or value throws
 * `CONFIG_INVALID` naming the exact field and the reason. The warnings about old keys are dropped here: `bin.ts`
 * reads them from `loadConfigFile` and the node logs them.
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
  return loadConfigFile({ configPath: path, env, cwd }).config;
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
  return parseCoreConfigText(text, env, source);
}

/** Which backplane a configuration selects: NATS when configured, else single-node on SQLite, else direct. */
export function backplaneKind(config: SluiceConfig): 'nats' | 'single' | 'direct' {
  const strategy = config.backplane.strategy;
  if (strategy !== 'auto') return strategy;
  if (config.nats !== undefined) return 'nats';
  return isSqliteStore(config.store) ? 'single' : 'direct';
}
