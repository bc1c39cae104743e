import { z } from 'zod';
import { PipelineCheckpointSchema } from './checkpoint.js';

const ShortString = z.string().min(1).max(512);

/** Why an alias moved: a requested rebuild, a changed schema/key/indexes, a restart that could not resume, an operator's promote or rollback. */
export const SwitchCause = {
  rebuild: 'rebuild',
  schemaChange: 'schema-change',
  restart: 'restart',
  promote: 'promote',
  rollback: 'rollback',
} as const;
export type SwitchCause = (typeof SwitchCause)[keyof typeof SwitchCause];
/** Validates a {@link SwitchCause}: the values of the const object, so the two never differ. */
export const SwitchCauseSchema = z.enum(SwitchCause);

/**
 * Published when an endpoint's alias moves to a new cache generation. Caches and alias-table versions are per
 * host, so the event names its `host` (the `node.id` of the app-server owning the `dataDir`): an api-server acts
 * on its own host's events only, and one host's version counter is never compared with another's.
 */
export const AliasRedirectedSchema = z.object({
  type: z.literal('AliasRedirected'),
  /** The host whose alias table moved: the `node.id` of the app-server that owns that `dataDir`. */
  host: ShortString,
  alias: ShortString,
  from: ShortString.nullable(),
  to: ShortString,
  checkpoint: PipelineCheckpointSchema.nullable(),
  /** Version of the alias table entry after the redirect. */
  version: z.number().int().nonnegative().optional(),
  /** Why the alias moved (readers switch the same way whatever the cause). */
  cause: SwitchCauseSchema.optional(),
  at: z.string(),
});
export type AliasRedirected = z.output<typeof AliasRedirectedSchema>;

/** Published when one source of an endpoint has finished its snapshot into a cache. */
export const SnapshottingDoneSchema = z.object({
  type: z.literal('SnapshottingDone'),
  endpoint: ShortString,
  cache: ShortString,
  source: ShortString,
  at: z.string(),
});
export type SnapshottingDone = z.output<typeof SnapshottingDoneSchema>;

export const SluiceEventSchema = z.discriminatedUnion('type', [
  AliasRedirectedSchema,
  SnapshottingDoneSchema,
]);
export type SluiceEvent = z.output<typeof SluiceEventSchema>;
export type SluiceEventType = SluiceEvent['type'];

/**
 * Builds an `AliasRedirected` event stamped now. `host` may be left out by code that does not know its host (a
 * pipeline): the event then carries an empty host, which publishing refuses (`VALIDATION_FAILED`) unless the
 * serving plane stamps it first (the app-server wraps its publisher so) — an event never leaves a process without its host.
 *
 * @example
 * ```ts
 * await events.publish(aliasRedirected({ host: 'h1', alias: 'items', from: 'items-01', to: 'items-02', checkpoint }));
 * ```
 */
export function aliasRedirected(
  input: Omit<AliasRedirected, 'type' | 'at' | 'host'> & { host?: string; at?: string },
): AliasRedirected {
  return {
    type: 'AliasRedirected',
    ...input,
    host: input.host ?? '',
    at: input.at ?? new Date().toISOString(),
  };
}

/** Builds a `SnapshottingDone` event stamped now. */
export function snapshottingDone(
  input: Omit<SnapshottingDone, 'type' | 'at'> & { at?: string },
): SnapshottingDone {
  return { type: 'SnapshottingDone', ...input, at: input.at ?? new Date().toISOString() };
}
