import { createHash } from 'node:crypto';
import { z } from 'zod';
import { UnsupportedAddressTypeError } from './errors.js';

/** A name that refers to configuration (connections, endpoints): letters, digits, `_`, `-`, `.`. */
export const NameSchema = z
  .string()
  .min(1)
  .max(128)
  .regex(
    /^[A-Za-z][A-Za-z0-9_.-]*$/,
    'must start with a letter and contain only letters, digits, ".", "_", "-"',
  );

/** A SQL identifier, optionally schema-qualified (`schema.table`). */
export const SqlIdentifierSchema = z
  .string()
  .min(1)
  .max(127)
  .regex(/^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/, 'must be a plain SQL identifier');

const PathSchema = z
  .string()
  .min(1)
  .max(4096)
  .refine((p) => !p.includes('\0'), { message: 'must not contain NUL bytes' });

export const FileFormat = { jsonl: 'jsonl', csv: 'csv' } as const;
export type FileFormat = (typeof FileFormat)[keyof typeof FileFormat];

/** A file on the node's file system, confined to the configured roots when it comes from a request. */
export const FileAddressSchema = z.strictObject({
  type: z.literal('file'),
  path: PathSchema,
  format: z.enum(FileFormat).default('jsonl'),
  /** Keep reading as the file grows (sources only). */
  follow: z.boolean().optional(),
});
export type FileAddress = z.output<typeof FileAddressSchema>;

const KeySchema = z.union([z.string().min(1).max(127), z.array(z.string().min(1).max(127)).min(1).max(16)]);

/** A replication slot or publication name: lower-case letters, digits and `_` (PostgreSQL's slot rule). */
const ReplicationName = z
  .string()
  .min(1)
  .max(63)
  .regex(/^[a-z0-9_]+$/, 'must contain only lower-case letters, digits and "_"');

/** How a PostgreSQL source reads changes. */
export const PostgresCapture = { replication: 'replication', poll: 'poll' } as const;
export type PostgresCapture = (typeof PostgresCapture)[keyof typeof PostgresCapture];

/** A PostgreSQL table (or, as a source, a query) on a configured connection. */
export const PostgresAddressSchema = z
  .strictObject({
    type: z.literal('postgres'),
    connection: NameSchema,
    table: SqlIdentifierSchema.optional(),
    query: z.string().min(1).max(16_384).optional(),
    key: KeySchema.optional(),
    /** Monotonic column used for incremental reads after the snapshot (e.g. `updated_at`). */
    cursor: z.string().min(1).max(127).optional(),
    /**
     * How a table source sees changes: `replication` (logical replication: snapshot, then every insert, update,
     * delete and truncate) or `poll` (keyset snapshot, then the `cursor` column). See {@link postgresCapture}.
     */
    capture: z.enum(PostgresCapture).optional(),
    /** Replication slot name (default derived from the node id and the source's handle). */
    slot: ReplicationName.optional(),
    /** Publication name (default derived from the node id and the source's handle). */
    publication: ReplicationName.optional(),
    /**
     * Replication only: write a row to `table` (default `sluice_heartbeat`, created if absent and added to the
     * publication) every `intervalMs`, so the slot advances through its own transactions even when the table is idle.
     */
    heartbeat: z
      .strictObject({
        table: SqlIdentifierSchema.optional(),
        intervalMs: z.number().int().min(100).max(86_400_000),
      })
      .optional(),
  })
  .refine((a) => (a.table === undefined) !== (a.query === undefined), {
    message: 'exactly one of "table" or "query" is required',
    path: ['table'],
  })
  .refine((a) => a.capture !== 'replication' || a.table !== undefined, {
    message: 'capture "replication" reads a table; a "query" source polls',
    path: ['capture'],
  })
  .refine((a) => (a.slot === undefined && a.publication === undefined) || a.capture !== 'poll', {
    message: '"slot" and "publication" belong to capture "replication"',
    path: ['slot'],
  })
  .refine((a) => a.heartbeat === undefined || (a.capture !== 'poll' && a.table !== undefined), {
    message: '"heartbeat" belongs to capture "replication" of a table',
    path: ['heartbeat'],
  });
export type PostgresAddress = z.output<typeof PostgresAddressSchema>;

/**
 * The stable default name of a replication slot or publication: `sluice_<node>_<handle>`, lower-cased to
 * PostgreSQL's slot alphabet (`[a-z0-9_]`), at most 63 characters (a hash of the full name keeps long ones
 * distinct). Never random: a restart finds the same slot. Names that differ only in case, `-`, `.` or `_` get the
 * same one — configuration refuses two endpoints of a host that would (`config/rules.ts`).
 *
 * @example
 * ```ts
 * defaultReplicationName('h1', 'orders.source'); // 'sluice_h1_orders_source'
 * ```
 */
export function defaultReplicationName(nodeId: string, handle: string): string {
  const full = `sluice_${nodeId}_${handle}`.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  if (full.length <= 63) return full;
  const hash = createHash('sha256').update(full).digest('hex').slice(0, 10);
  return `${full.slice(0, 52)}_${hash}`;
}

/**
 * The capture mode of a PostgreSQL source. An endpoint's table source without a `cursor` reads logical
 * replication unless it says `capture: poll`; a source naming a `cursor`, a `query`, and every transfer source poll
 * unless they say `capture: replication` (so existing configurations keep their behaviour).
 *
 * @example
 * ```ts
 * postgresCapture({ type: 'postgres', connection: 'db', table: 'orders' }, 'endpoint'); // 'replication'
 * postgresCapture({ type: 'postgres', connection: 'db', table: 'orders', cursor: 'updated_at' }, 'endpoint'); // 'poll'
 * ```
 */
export function postgresCapture(address: PostgresAddress, role: 'endpoint' | 'transfer'): PostgresCapture {
  if (address.capture !== undefined) return address.capture;
  return role === 'endpoint' && address.table !== undefined && address.cursor === undefined
    ? 'replication'
    : 'poll';
}

/** A subject's tokens: NATS separates them with ".". */
const subjectTokens = (subject: string) => subject.split('.');

/**
 * A NATS subject as a source filters by: tokens separated by ".", none empty (the server refuses `orders..eu`,
 * `.orders`, `orders.` — a publish to one failed as "jetstream is not enabled"); `*` stands for one token and `>` for
 * all the rest, so `>` can only be the last token.
 */
const SubjectSchema = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[^\s]+$/, 'must not contain spaces')
  .refine((subject) => subjectTokens(subject).every((token) => token !== ''), {
    message: 'must be tokens separated by "." with none empty (no leading, trailing or doubled ".")',
  })
  .refine(
    (subject) => subjectTokens(subject).every((token, i, all) => token !== '>' || i === all.length - 1),
    { message: '">" stands for the rest of a subject, so it can only be the last token' },
  );

/**
 * The subject a destination publishes to: one concrete subject. `*` and `>` are wildcards, which only filter what is
 * read; published, they became a literal subject (`orders.*`) that no consumer of a concrete subject receives.
 */
const PublishSubjectSchema = SubjectSchema.refine(
  (subject) => subjectTokens(subject).every((token) => token !== '*' && token !== '>'),
  {
    message:
      'a destination publishes to one subject: "*" and ">" are wildcards, which only a source can filter by (name a concrete subject, e.g. "orders.eu")',
  },
);

/** A NATS JetStream stream and subject, optionally on a configured connection. */
export const JetStreamAddressSchema = z.strictObject({
  type: z.literal('jetstream'),
  stream: z
    .string()
    .min(1)
    .max(255)
    .regex(/^[^\s.*>]+$/, 'must not contain spaces, ".", "*" or ">"'),
  /** As a source, the subjects read (wildcards allowed); as a destination, the one subject published to. */
  subject: SubjectSchema,
  connection: NameSchema.optional(),
  /** The field of each record used as its key (for dedupe ids and cache keys). */
  key: KeySchema.optional(),
});
export type JetStreamAddress = z.output<typeof JetStreamAddressSchema>;

/** A JetStream address as a destination: its subject is one concrete subject, no wildcard. */
const JetStreamDestinationSchema = JetStreamAddressSchema.extend({ subject: PublishSubjectSchema });

/** A local endpoint's cache (destination only). */
export const EndpointAddressSchema = z.strictObject({
  type: z.literal('endpoint'),
  endpoint: NameSchema,
});
export type EndpointAddress = z.output<typeof EndpointAddressSchema>;

export const SourceAddressSchema = z.discriminatedUnion('type', [
  FileAddressSchema,
  PostgresAddressSchema,
  JetStreamAddressSchema,
]);
export type SourceAddress = z.output<typeof SourceAddressSchema>;

export const DestinationAddressSchema = z.discriminatedUnion('type', [
  FileAddressSchema,
  PostgresAddressSchema,
  JetStreamDestinationSchema,
  EndpointAddressSchema,
]);
export type DestinationAddress = z.output<typeof DestinationAddressSchema>;

export type DataAddress = SourceAddress | DestinationAddress;

export const SOURCE_TYPES: ReadonlySet<string> = new Set(['file', 'postgres', 'jetstream']);
export const DESTINATION_TYPES: ReadonlySet<string> = new Set(['file', 'postgres', 'jetstream', 'endpoint']);

/**
 * Refuses an address whose `type` is a string this node does not know, before schema validation, so
 * that an unknown type is a 422 `UNSUPPORTED_ADDRESS_TYPE` rather than a generic validation failure.
 */
export function assertKnownAddressType(role: 'source' | 'destination', address: unknown): void {
  if (typeof address !== 'object' || address === null) return;
  const type = (address as { type?: unknown }).type;
  if (typeof type !== 'string') return;
  const known = role === 'source' ? SOURCE_TYPES : DESTINATION_TYPES;
  if (!known.has(type)) throw new UnsupportedAddressTypeError(role, type.slice(0, 64));
}

/** The key fields of an address's `key` option as a list. */
export function keyFields(key: string | string[] | undefined): string[] {
  if (key === undefined) return [];
  return Array.isArray(key) ? key : [key];
}
