import { PipelineCheckpointSchema, type QueryLimits, querySchema } from '@sluice/core';
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
  recordCount: z.number().int(),
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

export const ProblemSchema = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    code: z.string(),
    instance: z.string().optional(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  .describe('RFC 9457 problem details');

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
