import { z } from 'zod';

/**
 * `backplane`: how nodes find a transfer's owner and fan out events. `auto` picks NATS when `nats` is set, else
 * single-node on a SQLite store, else direct-address; the cross-field rules live in `rules.ts`.
 */
export const BackplaneConfigSchema = z
  .strictObject({ strategy: z.enum(['auto', 'nats', 'direct', 'single']).default('auto') })
  .prefault({});
export type BackplaneConfig = z.output<typeof BackplaneConfigSchema>;
