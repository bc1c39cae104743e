import { readFile } from 'node:fs/promises';
import { ConfigError, resolveConfig, type SluiceConfig } from '@sluice/core';
import YAML from 'yaml';

/** Largest configuration file accepted (configuration is trusted, but a runaway file is still a mistake). */
const MAX_CONFIG_BYTES = 4 * 1024 * 1024;

/**
 * Loads the node configuration: the YAML file at `path` (or embedded defaults when `path` is undefined),
 * environment overrides applied, validated by core's schema. A bad file or value throws `CONFIG_INVALID`
 * naming the exact field and the reason.
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
): Promise<SluiceConfig> {
  if (path === undefined) return resolveConfig({}, env);
  let text: string;
  try {
    const buffer = await readFile(path);
    if (buffer.byteLength > MAX_CONFIG_BYTES)
      throw new ConfigError(`Configuration file ${path} is larger than ${MAX_CONFIG_BYTES} bytes`);
    text = buffer.toString('utf8');
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError(`Cannot read configuration file ${path}: ${(err as Error).message}`, [], {
      cause: err,
    });
  }
  return parseConfigText(text, env, path);
}

/**
 * Parses YAML configuration text and validates it (with environment overrides).
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
  const document = YAML.parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  const yamlError = document.errors[0];
  if (yamlError) {
    const where = yamlError.linePos?.[0];
    const position = where ? ` at line ${where.line}, column ${where.col}` : '';
    throw new ConfigError(`${source} is not valid YAML${position}: ${yamlError.message.split('\n')[0]}`, [
      { path: '(root)', message: yamlError.message.split('\n')[0] ?? 'invalid YAML' },
    ]);
  }
  const raw: unknown = document.toJS({ maxAliasCount: 100 });
  if (raw !== null && raw !== undefined && (typeof raw !== 'object' || Array.isArray(raw)))
    throw new ConfigError(`${source} must be a YAML mapping`, [
      { path: '(root)', message: 'expected a mapping' },
    ]);
  try {
    const config = resolveConfig(raw ?? {}, env);
    assertBackplaneChoice(config);
    return config;
  } catch (err) {
    if (err instanceof ConfigError) {
      const lines = err.errors.map((issue) => `  ${issue.path}: ${issue.message}`).join('\n');
      throw new ConfigError(
        `Invalid configuration in ${source}${lines ? `:\n${lines}` : `: ${err.message}`}`,
        err.errors,
        { cause: err },
      );
    }
    throw err;
  }
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
