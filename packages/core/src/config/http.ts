import { z } from 'zod';

/** `http`: bounds of both apps' HTTP APIs. */
export const HttpConfigSchema = z
  .strictObject({
    /** Largest request body (larger → 413 `PAYLOAD_TOO_LARGE`). */
    bodyBytes: z
      .number()
      .int()
      .min(1024)
      .max(64 * 1024 * 1024)
      .default(1024 * 1024),
    /** Largest page of `GET /v1/transfers`. */
    pageSizeMax: z.number().int().min(1).max(10_000).default(500),
  })
  .prefault({});
export type HttpConfig = z.output<typeof HttpConfigSchema>;
