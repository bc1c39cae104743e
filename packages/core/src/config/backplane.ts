import { z } from 'zod';

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
