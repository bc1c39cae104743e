import { z } from 'zod';
import { ListenHost, PortSchema } from './primitives.js';

const JwtAuthSchema = z.strictObject({
  /** HS256 shared secret. */
  jwtSecret: z.string().min(16, 'must be at least 16 characters'),
  issuer: z.string().optional(),
  audience: z.string().optional(),
});

/**
 * An allowed CORS origin, as a browser's `origin` header spells it (`scheme://host[:port]`, lower case, no default
 * port, no path): the CORS plugin compares the text exactly, so any other spelling never matches and CORS silently
 * stays off for that page. `*` (any origin) and `null` are taken as written.
 */
const CorsOrigin = z.string().superRefine((origin, ctx) => {
  if (origin === '*' || origin === 'null') return;
  const sent = URL.canParse(origin) ? new URL(origin).origin : 'null';
  if (sent === 'null') ctx.addIssue({ code: 'custom', message: 'must be an origin: scheme://host[:port]' });
  else if (sent !== origin)
    ctx.addIssue({
      code: 'custom',
      message: `a browser sends "${sent}" (lower case, no default port, no path): write that`,
    });
});

/**
 * Defaults of the api-server's own settings, read by the api-server where an option is left out.
 * `changesMaxPerClient` is `api.changes.maxPerClient`'s, lowered to `api.changes.maxSubscribers` when that is less.
 */
export const API_DEFAULTS = { reconcileMs: 5_000, changesMaxPerClient: 100 } as const;

/** `api`: the api-servers of this host (the query API over the LMDB caches). */
export const ApiConfigSchema = z
  .strictObject({
    host: ListenHost.default('127.0.0.1'),
    port: PortSchema.default(8080),
    auth: JwtAuthSchema.optional(),
    cors: z.strictObject({ origins: z.union([z.literal(true), z.array(CorsOrigin)]) }).optional(),
    reconcileMs: z.number().int().min(100).max(600_000).default(API_DEFAULTS.reconcileMs),
    /**
     * Longest wait of a read sending `sluice-min-position` for the serving generation to commit that position;
     * then `503 POSITION_NOT_REACHED` with `retry-after`.
     */
    freshnessWaitMs: z.number().int().min(0).max(60_000).default(2_000),
    /** Change feeds (`GET /v1/endpoints/:name/changes`). */
    changes: z
      .strictObject({
        /** A comment line is sent this often on an idle feed (keeps proxies and clients from timing out). */
        heartbeatMs: z.number().int().min(100).max(600_000).default(15_000),
        /** Bytes a subscriber may leave unread before it is disconnected (it resumes by token). */
        bufferBytes: z
          .number()
          .int()
          .min(16 * 1024)
          .max(256 * 1024 * 1024)
          .default(4 * 1024 * 1024),
        /** How often each followed generation's log head is checked for another process's commits. */
        pollMs: z.number().int().min(1).max(10_000).default(5),
        /** Most concurrent subscribers per api-server (more → 429 `QUEUE_FULL`, `retry-after`). */
        maxSubscribers: z.number().int().min(1).max(1_000_000).default(10_000),
        /**
         * Most concurrent subscribers of one client per api-server (more → 429 `QUEUE_FULL`, `retry-after`), so that
         * one client opening feeds in a loop cannot take every slot of `maxSubscribers`. A client is the bearer
         * token's `sub` (else its `jti`, else the token itself) with `api.auth`, the remote address without it.
         */
        maxPerClient: z.number().int().min(1).max(1_000_000).optional(),
      })
      // Left out, the per-client bound is its default, or the process bound when that is lower: a small
      // `maxSubscribers` alone is no mistake. Written above `maxSubscribers`, it is refused (rules.ts).
      .transform((changes) => ({
        ...changes,
        maxPerClient:
          changes.maxPerClient ?? Math.min(API_DEFAULTS.changesMaxPerClient, changes.maxSubscribers),
      }))
      .prefault({}),
  })
  .prefault({});
export type ApiConfig = z.output<typeof ApiConfigSchema>;
