import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute, resolve } from 'node:path';
import { ConfigError, resolveConfig, type SluiceConfig } from '@sluice/core';
import YAML from 'yaml';

/** Largest configuration file read (configuration is trusted, but not unbounded). */
const MAX_CONFIG_BYTES = 4 * 1024 * 1024;

export interface LoadedConfig {
  config: SluiceConfig;
  /** The file read, or `null` when running on defaults. */
  path: string | null;
  /** Directory that relative paths in the configuration (`dataDir`) are resolved against (the working directory). */
  baseDir: string;
  /** `dataDir` as an absolute path. */
  dataDir: string;
}

export interface LoadConfigOptions {
  /** `--config`; when absent, `./sluice.yaml` is used if it exists, else the embedded defaults. */
  configPath?: string;
  env?: Record<string, string | undefined>;
  cwd?: string;
}

/**
 * Reads `sluice.yaml` (the same file as the host's app-server) and validates it with core's `resolveConfig`,
 * after the environment overrides (`SLUICE_API_PORT`, `SLUICE_DATA_DIR`, `SLUICE_NATS_URL`, ...). A relative
 * `dataDir` resolves against the working directory, exactly as the app-server resolves it, so an app-server
 * and api-servers started from the same directory with the same file find the same caches.
 *
 * @example
 * ```ts
 * const { config, dataDir } = loadConfig({ configPath: 'sluice.yaml', env: process.env });
 * ```
 */
export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const cwd = options.cwd ?? process.cwd();
  const env = options.env ?? {};
  let path: string | null = null;
  if (options.configPath !== undefined) path = resolve(cwd, options.configPath);
  else if (existsSync(resolve(cwd, 'sluice.yaml'))) path = resolve(cwd, 'sluice.yaml');
  let raw: unknown = {};
  if (path !== null) {
    let text: string;
    try {
      const buffer = readFileSync(path);
      if (buffer.byteLength > MAX_CONFIG_BYTES)
        throw new ConfigError(`Configuration file ${path} is larger than ${MAX_CONFIG_BYTES} bytes`);
      text = buffer.toString('utf8');
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      throw new ConfigError(`Cannot read configuration file ${path}: ${(err as Error).message}`, [], {
        cause: err,
      });
    }
    try {
      raw = YAML.parse(text) ?? {};
    } catch (err) {
      throw new ConfigError(`Configuration file ${path} is not valid YAML: ${(err as Error).message}`, [], {
        cause: err,
      });
    }
  }
  const config = resolveConfig(raw, env);
  const baseDir = cwd;
  const dataDir = isAbsolute(config.dataDir) ? config.dataDir : resolve(baseDir, config.dataDir);
  return { config, path, baseDir, dataDir };
}
