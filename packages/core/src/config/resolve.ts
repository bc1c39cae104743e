import { ConfigError } from '../errors.js';
import { configErrorOf, parseConfigOrThrow } from '../validation.js';
import { type ConfigWarning, moveOldKeys } from './moved-keys.js';
import { type SluiceConfig, SluiceConfigSchema } from './schema.js';

/** Environment variables that override configuration keys. */
export const ENV_OVERRIDES = {
  SLUICE_NODE_ID: 'node.id',
  SLUICE_PORT: 'node.port',
  SLUICE_ADVERTISED_URL: 'node.advertisedUrl',
  SLUICE_STORE_URL: 'store',
  SLUICE_NATS_URL: 'nats',
  SLUICE_DATA_DIR: 'dataDir',
  SLUICE_FILE_ROOTS: 'files.roots',
  SLUICE_API_PORT: 'api.port',
  SLUICE_LOG_LEVEL: 'logLevel',
} as const;

const NUMERIC_PATHS = new Set(['node.port', 'api.port']);

/**
 * Sets `path` in `target`, creating missing parent objects. A parent that is present but not an object
 * (`node: 5`) is left alone, so validation reports it instead of the override silently replacing it.
 */
function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const parts = path.split('.');
  let cursor = target;
  for (const part of parts.slice(0, -1)) {
    const next = cursor[part];
    if (next === undefined || next === null) cursor[part] = {};
    else if (typeof next !== 'object' || Array.isArray(next)) return;
    cursor = cursor[part] as Record<string, unknown>;
  }
  cursor[parts[parts.length - 1]!] = value;
}

/** A validated configuration and what start-up should warn about (old keys that still work). */
export interface ParsedConfig {
  config: SluiceConfig;
  warnings: ConfigWarning[];
}

/**
 * Validates a raw configuration (parsed YAML, or `{}` for embedded defaults) after applying environment
 * overrides and moving the keys of old sections to their new place (one warning each). A bad value throws
 * `CONFIG_INVALID` naming the exact path as written, e.g. `endpoints[0].primaryKey` or `limits.leaseMs`; a key
 * set at both its old and its new place is refused.
 *
 * @example
 * ```ts
 * const { config, warnings } = parseConfig(YAML.parse(text) ?? {}, process.env);
 * for (const warning of warnings) logger.warn({ key: warning.path, movedTo: warning.movedTo }, warning.message);
 * ```
 */
export function parseConfig(raw: unknown, env: Record<string, string | undefined> = {}): ParsedConfig {
  const base = raw === null || raw === undefined ? {} : raw;
  if (typeof base !== 'object' || Array.isArray(base))
    return { config: parseConfigOrThrow(SluiceConfigSchema, base), warnings: [] };
  let merged: Record<string, unknown>;
  try {
    merged = structuredClone(base) as Record<string, unknown>;
  } catch (cause) {
    throw new ConfigError(
      'Invalid configuration: (root): not plain data',
      [{ path: '(root)', message: 'must be plain data (objects, arrays, strings, numbers, booleans)' }],
      { cause },
    );
  }
  for (const [variable, path] of Object.entries(ENV_OVERRIDES)) {
    const value = env[variable];
    if (value === undefined || value === '') continue;
    // Any decimal number is passed on as one, so the schema says what is wrong with it (negative, fractional,
    // too big) rather than that it is a string; anything else stays text, refused as not a number.
    if (NUMERIC_PATHS.has(path)) setPath(merged, path, /^-?\d+(\.\d+)?$/.test(value) ? Number(value) : value);
    else if (path === 'files.roots')
      setPath(
        merged,
        path,
        value.split(':').filter((p) => p !== ''),
      );
    else setPath(merged, path, value);
  }
  const moved = moveOldKeys(merged);
  const result = SluiceConfigSchema.safeParse(moved.raw);
  if (!result.success || moved.issues.length > 0)
    throw configErrorOf(result.success ? undefined : result.error, {
      before: moved.issues,
      rename: (path) => moved.writtenAt.get(path) ?? path,
      context: { schema: SluiceConfigSchema, input: moved.raw },
    });
  const config = result.data;
  if (config.node.advertisedUrl === undefined) {
    const host = config.node.host === '0.0.0.0' || config.node.host === '::' ? '127.0.0.1' : config.node.host;
    // An IPv6 literal needs brackets in a URL (`http://[::1]:7070`).
    const urlHost = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
    config.node.advertisedUrl = `http://${urlHost}:${config.node.port}`;
  }
  return { config, warnings: moved.warnings };
}

/**
 * {@link parseConfig} without the warnings: for tests and tools that build a configuration in code. A process
 * reading an operator's file uses `parseConfig` or `loadConfigFile`, which return the warnings to log.
 *
 * @example
 * ```ts
 * const config = resolveConfig({ store: 'postgres://sluice@db/sluice' }, process.env);
 * ```
 */
export function resolveConfig(raw: unknown, env: Record<string, string | undefined> = {}): SluiceConfig {
  return parseConfig(raw, env).config;
}
