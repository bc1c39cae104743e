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
    /**
     * After SIGTERM, how long a server keeps serving with `GET /readyz` answering 503 before it stops accepting
     * requests: a load balancer that health-checks readiness needs this long to take it out (its check interval
     * times the failures it waits for), or the requests it still routes here are refused or reset.
     */
    drainDelayMs: z.number().int().min(0).max(600_000).default(1_000),
  })
  .prefault({});
export type HttpConfig = z.output<typeof HttpConfigSchema>;
