import { z } from 'zod';
import { isSqliteStore } from './store.js';

/**
 * `backplane`: how nodes find a transfer's owner and fan out events. `auto` picks NATS when `nats` is set, else
 * single-node on a SQLite store, else direct-address; the cross-field rules live in `rules.ts`.
 */
export const BackplaneConfigSchema = z
  .strictObject({
    strategy: z.enum(['auto', 'nats', 'direct', 'single']).default('auto'),
    /**
     * How long an app-server starting while NATS cannot be reached (refused, timed out, not resolvable) waits for
     * it, logging each second, before it exits with `BACKPLANE_UNAVAILABLE` (0: exit at once). Credentials or TLS
     * that NATS refuses fail at once.
     */
    connectWaitMs: z.number().int().min(0).max(3_600_000).default(30_000),
  })
  .prefault({});
export type BackplaneConfig = z.output<typeof BackplaneConfigSchema>;

/** The backplane a host runs: what the app-server creates and what its api-servers listen to. */
export type BackplaneKind = 'nats' | 'single' | 'direct';

/**
 * Which backplane a configuration selects — one definition for the app-server (which backplane it creates) and
 * the api-servers (whether alias events come over NATS, or the alias table is watched): `backplane.strategy`, or
 * with `auto` NATS when `nats` is set, else single-node on a SQLite store, else direct-address.
 *
 * @example
 * ```ts
 * if (backplaneKind(config) === 'nats') backplane = await createNatsBackplane({ nats: config.nats!, … });
 * ```
 */
export function backplaneKind(config: {
  backplane: BackplaneConfig;
  nats?: unknown;
  store: string;
}): BackplaneKind {
  const strategy = config.backplane.strategy;
  if (strategy !== 'auto') return strategy;
  if (config.nats !== undefined) return 'nats';
  return isSqliteStore(config.store) ? 'single' : 'direct';
}
