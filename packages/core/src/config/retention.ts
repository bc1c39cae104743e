import { z } from 'zod';

/** `retention`: how long finished records are kept (each node purges hourly; whichever gets there first). */
export const RetentionConfigSchema = z
  .strictObject({
    /** Days a finished transfer record is kept (0 = forever). */
    transferDays: z.number().min(0).max(36_500).default(30),
  })
  .prefault({});
export type RetentionConfig = z.output<typeof RetentionConfigSchema>;

const DAY_MS = 86_400_000;

/**
 * `retention.transferDays` as the whole milliseconds the store's `purge` takes (0 = keep forever). Days may be any
 * number, and most fractions of a day (1.1, 0.7, 2.3) have no exact binary product with a day's milliseconds: the
 * product is rounded, never to 0 for a positive retention (that would mean "forever").
 *
 * @example
 * ```ts
 * transferRetentionMs({ transferDays: 1.1 }); // 95_040_000
 * ```
 */
export function transferRetentionMs(retention: RetentionConfig): number {
  if (retention.transferDays <= 0) return 0;
  return Math.max(1, Math.round(retention.transferDays * DAY_MS));
}
