import { z } from 'zod';

/** `retention`: how long finished records are kept (each node purges hourly; whichever gets there first). */
export const RetentionConfigSchema = z
  .strictObject({
    /** Days a finished transfer record is kept (0 = forever). */
    transferDays: z.number().min(0).max(36_500).default(30),
  })
  .prefault({});
export type RetentionConfig = z.output<typeof RetentionConfigSchema>;
