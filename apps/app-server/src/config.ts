/** Parses YAML configuration text and validates it like `loadConfig` (core's `parseConfigText`). */
/** Which backplane a configuration selects (core's one definition, which the api-servers follow too). */
export { backplaneKind, parseConfigText } from '@sluice/core';
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
