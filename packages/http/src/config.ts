import { type LoadedConfigFile, loadConfigFile, type SluiceConfig } from '@sluice/core';

/** Options of {@link loadConfig}. */
export interface LoadConfigOptions {
  /** `--config`; when absent, `./sluice.yaml` is read if it exists, else the embedded defaults apply. */
  configPath?: string | undefined;
  /** The environment the `SLUICE_*` overrides are read from (default: none; a program passes `process.env`). */
  env?: Record<string, string | undefined>;
  /** Where `sluice.yaml` is looked for and what relative paths resolve against (default: `process.cwd()`). */
  cwd?: string;
  /**
   * An app's own rules, run after core's schema accepted the file (e.g. the app-server's backplane choice);
   * throws `CONFIG_INVALID` (core's `ConfigError`) naming the field.
   */
  validate?: (config: SluiceConfig) => void;
}

/** What {@link loadConfig} returns: core's loaded file (config, the path read, the absolute `dataDir`). */
export type LoadedConfig = LoadedConfigFile;

/**
 * Loads a host's configuration the one way both apps do: core's `loadConfigFile` (the `--config` file, else
 * `./sluice.yaml`, else the embedded defaults; environment overrides; core's schema), then the app's own
 * `validate`. Synchronous; every failure is `CONFIG_INVALID` naming the field and the reason.
 *
 * @example
 * ```ts
 * const { config, dataDir, path } = loadConfig({ configPath: 'sluice.yaml', env: process.env });
 * ```
 */
export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const loaded = loadConfigFile({
    configPath: options.configPath,
    env: options.env ?? {},
    cwd: options.cwd ?? process.cwd(),
  });
  options.validate?.(loaded.config);
  return loaded;
}
