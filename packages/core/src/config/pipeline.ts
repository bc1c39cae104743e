import { z } from 'zod';

/** The pipelines' commit cadence defaults, defined once (the schema and `@sluice/pipeline` read them). */
export const PIPELINE_DEFAULTS = { commitEveryRecords: 10_000, commitEveryMs: 1_000 } as const;

/** `pipeline`: how often endpoint pipelines commit to their cache (whichever comes first). */
export const PipelineConfigSchema = z
  .strictObject({
    commitEveryRecords: z.number().int().min(1).max(10_000_000).default(PIPELINE_DEFAULTS.commitEveryRecords),
    commitEveryMs: z.number().int().min(10).max(3_600_000).default(PIPELINE_DEFAULTS.commitEveryMs),
  })
  .prefault({});
export type PipelineConfig = z.output<typeof PipelineConfigSchema>;
