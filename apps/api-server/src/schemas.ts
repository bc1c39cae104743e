import {
  EVERY_ROUTE_PROBLEMS,
  PipelineCheckpointSchema,
  PROBLEM_RESPONSE,
  type QueryLimits,
  querySchema,
} from '@sluice/core';
import { z } from 'zod';

/**
 * Zod schemas of the HTTP API. They feed the OpenAPI document (`/docs`, `/docs/json`); query bodies are
 * validated by core's `parseQuery` / `parseCountQuery` with the configured limits, so the documented schema
 * and the enforced one are the same zod code.
 */

/**
 * The query string of a route that takes no parameters: any parameter is refused (400 `VALIDATION_FAILED` at
 * `querystring.<name>`) rather than ignored — a mistyped or unsupported parameter would otherwise answer as if
 * it had been applied.
 */
export const NoQuerySchema = z.strictObject({});

export const EndpointParamsSchema = z.object({
  name: z.string().min(1).max(256).describe('Endpoint name (its alias)'),
});

export const RecordParamsSchema = z.object({
  name: z.string().min(1).max(256).describe('Endpoint name (its alias)'),
  key: z
    .string()
    .min(1)
    .max(8192)
    .describe(
      'Primary key, converted to the key field type. Composite keys: percent-encoded components joined by "," in primaryKey order (a comma inside a component is "%2C").',
    ),
});

/**
 * The query string of `GET /v1/endpoints/:name/records?key=…`: the key segment as a parameter, the only form that
 * carries a single-field key equal to the empty string (a path cannot end in an empty segment that means something).
 */
export const RecordKeyQuerySchema = z.strictObject({
  key: z
    .string()
    .max(8192)
    .describe(
      'Primary key, encoded as the `/records/:key` path segment (components percent-encoded, joined by ","; a "+" is a space). `key=` is the empty string.',
    ),
});

export const CacheSchemaDoc = z.object({
  fields: z.record(z.string(), z.string()),
  primaryKey: z.array(z.string()),
  indexes: z.array(z.array(z.string())),
});

export const EndpointInfoSchema = z.object({
  name: z.string(),
  cache: z.string().describe('The concrete cache generation serving the endpoint'),
  version: z.number().int().describe('Alias-table version of the alias'),
  checkpoint: PipelineCheckpointSchema.nullable(),
  committedAt: z.string().nullable(),
  recordCount: z
    .number()
    .int()
    .nullable()
    .describe(
      'Records the caller may read; null for a token whose row filter no index narrows to cache.scanCap records (its count is refused too)',
    ),
  schema: CacheSchemaDoc,
});
export type EndpointInfo = z.output<typeof EndpointInfoSchema>;

export const EndpointListSchema = z.object({ endpoints: z.array(EndpointInfoSchema) });

export const RecordSchema = z.record(z.string(), z.unknown()).describe('The stored record');

export const QueryResultSchema = z.object({
  records: z.array(RecordSchema),
  next: z.string().nullable().describe('`$after` cursor for the next page, bound to this cache generation'),
});

export const CountBodySchema = z.strictObject({
  $filter: z.record(z.string(), z.unknown()).optional(),
});

export const CountResultSchema = z.object({ count: z.number().int() });

/** A problem response (`application/problem+json`), as core defines it (one declaration for both apps' documents). */
export const ProblemSchema = PROBLEM_RESPONSE;

/**
 * The problems every route can answer, declared so that a client generated from `/docs/json` knows them: 400 (a
 * query-string parameter the route does not take, a malformed header), 401 (auth), 500 (INTERNAL) and 503
 * (NODE_SHUTTING_DOWN while the server closes). Declaring them changes no reply's bytes: every route serializes
 * with plain `JSON.stringify` (app.ts), so nothing is dropped from a problem whatever its schema lists.
 *
 * @example
 * ```ts
 * app.get('/v1/endpoints', { schema: { response: { 200: EndpointListSchema, ...ROUTE_PROBLEMS } } }, handler);
 * ```
 */
export const ROUTE_PROBLEMS = EVERY_ROUTE_PROBLEMS;

/**
 * The problems of a route on one endpoint, over {@link ROUTE_PROBLEMS}: 403 (FORBIDDEN: the token may not read it,
 * or its row filter does not fit), 404 (UNKNOWN_ENDPOINT, RECORD_NOT_FOUND); its 503 is also ENDPOINT_NOT_READY
 * (the generation its alias names cannot be opened yet) and, with `sluice-min-position`, POSITION_NOT_REACHED.
 *
 * @example
 * ```ts
 * app.get('/v1/endpoints/:name', { schema: { response: { 200: EndpointInfoSchema, ...ENDPOINT_PROBLEMS } } }, handler);
 * ```
 */
export const ENDPOINT_PROBLEMS = { ...ROUTE_PROBLEMS, 403: ProblemSchema, 404: ProblemSchema } as const;

/**
 * The problems of a route that reads a body, over {@link ENDPOINT_PROBLEMS}: 413 (PAYLOAD_TOO_LARGE) and 415
 * (UNSUPPORTED_MEDIA_TYPE: a body that is not JSON).
 *
 * @example
 * ```ts
 * app.post('/v1/endpoints/:name/count', { schema: { response: { 200: CountResultSchema, ...BODY_PROBLEMS } } }, handler);
 * ```
 */
export const BODY_PROBLEMS = { ...ENDPOINT_PROBLEMS, 413: ProblemSchema, 415: ProblemSchema } as const;

/**
 * The `sluice-min-position` request header of the routes that read an endpoint. Documentation only: the header is
 * parsed where it is used (freshness.ts, with its own 400 naming `headers.sluice-min-position`), so the validator
 * passes headers through (app.ts).
 */
export const MinPositionHeadersSchema = z.object({
  'sluice-min-position': z
    .string()
    .optional()
    .describe(
      'Answer only once this position is committed: an RFC 8941 dictionary (source handle → LSN) as `sluice-position` sends, or a bare LSN for a one-source endpoint. Waits up to `api.freshnessWaitMs`, else 503 POSITION_NOT_REACHED with retry-after',
    ),
});

/**
 * The endpoint list's request headers (documentation only): `sluice-min-position` is declared so that a generated
 * client knows the route refuses it (a position names one endpoint's sources; the list waits for none).
 */
export const ListHeadersSchema = z.object({
  'sluice-min-position': z
    .string()
    .optional()
    .describe(
      "Not taken here: a request that sends it is refused (400 VALIDATION_FAILED at `headers.sluice-min-position`), since a position names one endpoint's sources and the list waits for none; send it to `GET /v1/endpoints/{name}`, which waits for it",
    ),
});

/** The change feed's request headers (documentation only, as {@link MinPositionHeadersSchema}). */
export const FeedHeadersSchema = z.object({
  'sluice-min-position': z
    .string()
    .optional()
    .describe(
      'Open the feed only once this position is committed (as on the other endpoint routes): the snapshot, or the changes after the token, then start from a generation that has it. Waits up to `api.freshnessWaitMs`, else 503 POSITION_NOT_REACHED with retry-after before any stream bytes; a malformed or unreachable one is 400 at `headers.sluice-min-position`',
    ),
  'last-event-id': z
    .string()
    .optional()
    .describe(
      'Resume after this event (its `id`), as a browser EventSource sends on reconnect; the `after` parameter wins when both are given',
    ),
});

/** The change feed's 200: an event stream, documented by content type (its frames are in the route's description). */
export const ChangeStreamResponse = {
  description:
    'Server-Sent Events: `retry`, then snapshot / upsert / delete / commit / live / switch / reset events, each with an `id` to resume after',
  content: { 'text/event-stream': { schema: z.string() } },
} as const;

export const HealthSchema = z.object({ status: z.string() });
export const ReadySchema = z.object({
  status: z.enum(['ready', 'starting', 'stopping']),
  endpoints: z.number().int(),
  backplane: z.string().nullable(),
});

/** The documented body of `POST /query`: core's wire query schema under the configured limits. */
export function queryBodySchema(limits: QueryLimits) {
  return querySchema(limits);
}
