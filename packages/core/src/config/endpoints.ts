import { z } from 'zod';
import { NameSchema, SourceAddressSchema } from '../addresses.js';
import { refuseProtoKey } from '../json.js';
import { DEFAULT_QUERY_LIMITS, filterSchema } from '../query.js';
import { FieldName } from './primitives.js';
import { QUERY_LIMIT_CEILINGS } from './query.js';
import { checkEndpoint, checkEndpointNames } from './rules.js';

export const FieldType = {
  string: 'string',
  integer: 'integer',
  number: 'number',
  boolean: 'boolean',
  timestamp: 'timestamp',
  json: 'json',
} as const;
export type FieldType = (typeof FieldType)[keyof typeof FieldType];
export const FieldTypeSchema = z.enum(FieldType);

/** How a green generation replaces the serving one (docs/architecture.md § Protocol 2). */
export const SwitchMode = { auto: 'auto', manual: 'manual' } as const;
export type SwitchMode = (typeof SwitchMode)[keyof typeof SwitchMode];

/** What an endpoint's `switch` means when it leaves a setting out. */
export const SWITCH_DEFAULTS = { handoverWaitMs: 10_000 } as const;

/**
 * The gates a green generation passes at `SnapshottingDone` before the alias moves to it. A green that breaks one,
 * or any green in `manual` mode, is held (it keeps following its source, the alias stays) until promoted. An
 * endpoint's first generation has nothing to protect and always switches. Absent gates are not checked.
 *
 * `handoverWaitMs` bounds the hand-over of a logical-replication endpoint's switch (docs/generations.md § The switch
 * hands over at a position): how long the serving generation stays paused for the green to reach its last position
 * before it follows again and the switch is put off, and how long a promote waits before `504 ENDPOINT_TIMEOUT`
 * (so also how long a promote request may take). Default {@link SWITCH_DEFAULTS}.
 *
 * @example
 * ```ts
 * SwitchConfigSchema.parse({ mode: 'manual', handoverWaitMs: 30_000 });
 * ```
 */
export const SwitchConfigSchema = z.strictObject({
  mode: z.enum(SwitchMode).default('auto'),
  /** Hold a green with fewer records than this fraction of the serving generation's (e.g. 0.9). */
  minRecordRatio: z.number().min(0).max(1000).optional(),
  /** Hold a green whose build skipped more bad records than this (e.g. 0). */
  maxBadRecords: z.number().int().min(0).optional(),
  /**
   * The longest a switch's hand-over waits, ms (default 10 000): at least 100 (a commit or two of the green), at most
   * 300 000 (a promote request waits this long before it answers 504).
   */
  handoverWaitMs: z.number().int().min(100).max(300_000).optional(),
});
export type SwitchConfig = z.output<typeof SwitchConfigSchema>;

/**
 * An endpoint's `filter`: the query filter grammar, bounded here only by the widest limits `query` takes; the
 * limits the file sets (`query.maxIn`, `query.maxDepth`) are applied across sections, by `checkEndpointFilters`.
 */
const EndpointFilterSchema = filterSchema({
  ...DEFAULT_QUERY_LIMITS,
  maxIn: QUERY_LIMIT_CEILINGS.maxIn,
  maxDepth: QUERY_LIMIT_CEILINGS.maxDepth,
});

/** One endpoint: a source materialized into a cache behind an alias of the same name. */
export const EndpointConfigSchema = z
  .strictObject({
    name: NameSchema,
    source: SourceAddressSchema,
    primaryKey: z.array(FieldName).min(1).max(8),
    /** Field types; inferred from the data when absent. */
    fields: refuseProtoKey(z.record(FieldName, FieldTypeSchema), 'not a valid field name').optional(),
    indexes: z.array(z.array(FieldName).min(1).max(8)).max(32).default([]),
    filter: EndpointFilterSchema.optional(),
    /** Projection: a list of fields to keep, or `{ newName: "sourceField" }` to rename. */
    select: z
      .union([
        z.array(FieldName).min(1),
        refuseProtoKey(z.record(FieldName, FieldName), 'not a valid field name'),
      ])
      .optional(),
    /** When a rebuilt generation takes over: automatically (past the gates; the default) or on promote. */
    switch: SwitchConfigSchema.optional(),
  })
  .superRefine(checkEndpoint);
export type EndpointConfig = z.output<typeof EndpointConfigSchema>;

/** `endpoints`: this host's endpoints, names unique. */
export const EndpointsConfigSchema = z
  .array(EndpointConfigSchema)
  .max(256)
  .default([])
  .superRefine(checkEndpointNames);
