import { z } from 'zod';

/** Bearer credentials of the app-server's control API: static tokens and/or HS256 JWTs. */
export const ControlAuthSchema = z
  .strictObject({
    tokens: z.array(z.string().min(16, 'must be at least 16 characters')).optional(),
    jwtSecret: z.string().min(16, 'must be at least 16 characters').optional(),
  })
  // `auth` present asks for auth: with nothing to check tokens against it would leave every route open.
  .refine((auth) => (auth.tokens?.length ?? 0) > 0 || auth.jwtSecret !== undefined, {
    message: 'needs tokens or a jwtSecret (leave control.auth out to run the control API without auth)',
  });

/** `control.maxStreamsPerClient` when left out, lowered to `control.maxStreams` when that is less. */
const MAX_STREAMS_PER_CLIENT_DEFAULT = 16;

/** `control`: the app-server's control API. */
export const ControlConfigSchema = z
  .strictObject({
    auth: ControlAuthSchema.optional(),
    /** Most endpoint streams (`GET /v1/endpoints/stream`) open at once per app-server (more → 429 `QUEUE_FULL`). */
    maxStreams: z.number().int().min(1).max(100_000).default(256),
    /**
     * Most endpoint streams of one client per app-server (more → 429 `QUEUE_FULL`), so that one client opening
     * streams in a loop cannot take every slot of `maxStreams`. A client is the bearer token's `sub` (else its
     * `jti`, else the token itself) with `control.auth`, the remote address without it.
     */
    maxStreamsPerClient: z.number().int().min(1).max(100_000).optional(),
  })
  // Left out, the per-client bound is its default, or the process bound when that is lower: a small `maxStreams`
  // alone is no mistake. Written above `maxStreams`, it is refused (rules.ts).
  .transform((control) => ({
    ...control,
    maxStreamsPerClient:
      control.maxStreamsPerClient ?? Math.min(MAX_STREAMS_PER_CLIENT_DEFAULT, control.maxStreams),
  }))
  .prefault({});
export type ControlConfig = z.output<typeof ControlConfigSchema>;
