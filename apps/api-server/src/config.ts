import { existsSync, readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { ConfigError, resolveConfig, type SluiceConfig } from '@sluice/core';
import YAML from 'yaml';

/** Largest configuration file read (configuration is trusted, but not unbounded). */
const MAX_CONFIG_BYTES = 4 * 1024 * 1024;

export interface LoadedConfig {
  config: SluiceConfig;
  /** The file read, or `null` when running on defaults. */
  path: string | null;
  /** Directory that relative paths in the configuration (`dataDir`) are resolved against. */
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
 * after the environment overrides (`SLUICE_API_PORT`, `SLUICE_DATA_DIR`, `SLUICE_NATS_URL`, ...). Relative
 * `dataDir` values resolve against the configuration file's directory (the working directory without a file
 * or when set through `SLUICE_DATA_DIR`),
 * so every process of a host finds the same caches whatever directory it was started from.
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
  const baseDir = path === null ? cwd : dirname(path);
  // A relative SLUICE_DATA_DIR is the operator's shell talking: resolve it against the working directory.
  const dataDirBase = env.SLUICE_DATA_DIR ? cwd : baseDir;
  const dataDir = isAbsolute(config.dataDir) ? config.dataDir : resolve(dataDirBase, config.dataDir);
  return { config, path, baseDir, dataDir };
}
