import { type ConfigWarning, loadConfigFile, type SluiceConfig } from '@sluice/core';

export interface LoadedConfig {
  config: SluiceConfig;
  /** The file read, or `null` when running on defaults. */
  path: string | null;
  /** Directory that relative paths in the configuration (`dataDir`) are resolved against (the working directory). */
  baseDir: string;
  /** `dataDir` as an absolute path. */
  dataDir: string;
  /** Keys that still work but moved (one each), for the start-up log. */
  warnings: ConfigWarning[];
}

export interface LoadConfigOptions {
  /** `--config`; when absent, `./sluice.yaml` is used if it exists, else the embedded defaults. */
  configPath?: string;
  env?: Record<string, string | undefined>;
  cwd?: string;
}

/**
 * Reads `sluice.yaml` (the same file as the host's app-server) with core's `loadConfigFile`, after the
 * environment overrides (`SLUICE_API_PORT`, `SLUICE_DATA_DIR`, `SLUICE_NATS_URL`, ...). A relative `dataDir`
 * resolves against the working directory, exactly as the app-server resolves it, so an app-server and
 * api-servers started from the same directory with the same file find the same caches.
 *
 * @example
 * ```ts
 * const { config, dataDir } = loadConfig({ configPath: 'sluice.yaml', env: process.env });
 * ```
 */
export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const cwd = options.cwd ?? process.cwd();
  const loaded = loadConfigFile({ configPath: options.configPath, env: options.env ?? {}, cwd });
  return { ...loaded, baseDir: cwd };
}
