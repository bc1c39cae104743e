import { z } from 'zod';
import { NameSchema, SourceAddressSchema } from './addresses.js';
import { ConfigError } from './errors.js';
import { refuseProtoKey } from './json.js';
import { DEFAULT_QUERY_LIMITS, filterSchema } from './query.js';
import { parseConfigOrThrow } from './validation.js';

const UrlString = z.string().min(1).max(2048);

export const FieldType = {
  string: 'string',
  integer: 'integer',
  number: 'number',
  boolean: 'boolean',
  timestamp: 'timestamp',
  json: 'json',
} as const;
export type FieldType = (typeof FieldType)[keyof typeof FieldType];
export const FieldTypeSchema = z.enum(['string', 'integer', 'number', 'boolean', 'timestamp', 'json']);

const FieldName = z
  .string()
  .min(1)
  .max(256)
  .refine((f) => !f.startsWith('$') && f !== '__proto__' && f !== 'constructor' && f !== 'prototype', {
    message: 'not a valid field name',
  });

/** How a green generation replaces the serving one (docs/architecture.md § Protocol 2). */
export const SwitchMode = { auto: 'auto', manual: 'manual' } as const;
export type SwitchMode = (typeof SwitchMode)[keyof typeof SwitchMode];

/**
 * The gates a green generation passes at `SnapshottingDone` before the alias moves to it. A green that breaks one,
 * or any green in `manual` mode, is held (it keeps following its source, the alias stays) until promoted. An
 * endpoint's first generation has nothing to protect and always switches. Absent gates are not checked.
 */
export const SwitchConfigSchema = z.strictObject({
  mode: z.enum(['auto', 'manual']).default('auto'),
  /** Hold a green with fewer records than this fraction of the serving generation's (e.g. 0.9). */
  minRecordRatio: z.number().min(0).max(1000).optional(),
  /** Hold a green whose build skipped more bad records than this (e.g. 0). */
  maxBadRecords: z.number().int().min(0).optional(),
});
export type SwitchConfig = z.output<typeof SwitchConfigSchema>;

/** One endpoint: a source materialized into a cache behind an alias of the same name. */
export const EndpointConfigSchema = z
  .strictObject({
    name: NameSchema,
    source: SourceAddressSchema,
    primaryKey: z.array(FieldName).min(1).max(8),
    /** Field types; inferred from the data when absent. */
    fields: refuseProtoKey(z.record(FieldName, FieldTypeSchema), 'not a valid field name').optional(),
    indexes: z.array(z.array(FieldName).min(1).max(8)).max(32).default([]),
    filter: filterSchema(DEFAULT_QUERY_LIMITS).optional(),
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
  .superRefine((endpoint, ctx) => {
    const fields = endpoint.fields;
    if (fields) {
      // Own keys only: "toString" must not count as declared because every object inherits it.
      const declared = (field: string) => Object.hasOwn(fields, field);
      endpoint.primaryKey.forEach((field, i) => {
        if (!declared(field))
          ctx.addIssue({ code: 'custom', path: ['primaryKey', i], message: `"${field}" is not in fields` });
      });
      endpoint.indexes.forEach((index, i) => {
        index.forEach((field, j) => {
          if (!declared(field))
            ctx.addIssue({ code: 'custom', path: ['indexes', i, j], message: `"${field}" is not in fields` });
        });
      });
    }
    if (Array.isArray(endpoint.select)) {
      endpoint.primaryKey.forEach((field, i) => {
        if (!(endpoint.select as string[]).includes(field))
          ctx.addIssue({ code: 'custom', path: ['primaryKey', i], message: `"${field}" is not selected` });
      });
    }
  });
export type EndpointConfig = z.output<typeof EndpointConfigSchema>;

const TlsSchema = z.strictObject({
  caFile: z.string().optional(),
  certFile: z.string().optional(),
  keyFile: z.string().optional(),
  rejectUnauthorized: z.boolean().default(true),
});

/** NATS connection options: a URL, or servers plus credentials and TLS. */
export const NatsConfigSchema = z.union([
  UrlString,
  z.strictObject({
    servers: z.union([UrlString, z.array(UrlString).min(1)]),
    user: z.string().optional(),
    pass: z.string().optional(),
    token: z.string().optional(),
    /** An nkey seed (starts with `SU`). */
    nkeySeed: z.string().optional(),
    credsFile: z.string().optional(),
    tls: TlsSchema.optional(),
  }),
]);
export type NatsConfig = z.output<typeof NatsConfigSchema>;

/** A named connection a request may refer to (requests never carry URLs or credentials). */
export const ConnectionConfigSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('postgres'), url: UrlString }),
  z.strictObject({ type: z.literal('nats'), nats: NatsConfigSchema }),
]);
export type ConnectionConfig = z.output<typeof ConnectionConfigSchema>;

const JwtAuthSchema = z.strictObject({
  /** HS256 shared secret. */
  jwtSecret: z.string().min(16, 'must be at least 16 characters'),
  issuer: z.string().optional(),
  audience: z.string().optional(),
});

export const ControlAuthSchema = z.strictObject({
  tokens: z.array(z.string().min(16, 'must be at least 16 characters')).optional(),
  jwtSecret: z.string().min(16, 'must be at least 16 characters').optional(),
});

export const LimitsSchema = z.strictObject({
  bodyBytes: z
    .number()
    .int()
    .min(1024)
    .max(64 * 1024 * 1024)
    .default(1024 * 1024),
  maxConcurrentTransfers: z.number().int().min(1).max(1024).default(4),
  queueSize: z.number().int().min(0).max(100_000).default(100),
  fireAndForgetConcurrency: z.number().int().min(1).max(1024).default(8),
  leaseMs: z.number().int().min(500).max(3_600_000).default(15_000),
  heartbeatMs: z.number().int().min(100).max(600_000).default(5_000),
  ownerWaitMs: z.number().int().min(10).max(60_000).default(2_000),
  sweepIntervalMs: z.number().int().min(100).max(600_000).default(5_000),
  shutdownGraceMs: z.number().int().min(0).max(600_000).default(10_000),
  pageSizeMax: z.number().int().min(1).max(10_000).default(500),
  queryLimitMax: z.number().int().min(1).max(100_000).default(DEFAULT_QUERY_LIMITS.maxLimit),
  queryLimitDefault: z.number().int().min(1).max(100_000).default(DEFAULT_QUERY_LIMITS.defaultLimit),
  inMax: z.number().int().min(1).max(100_000).default(DEFAULT_QUERY_LIMITS.maxIn),
  depthMax: z.number().int().min(1).max(64).default(DEFAULT_QUERY_LIMITS.maxDepth),
  retentionDays: z.number().min(0).max(36_500).default(30),
});
export type Limits = z.output<typeof LimitsSchema>;

/**
 * The schema of `sluice.yaml`, shared by the app-server and the api-servers of a host. Every key has a
 * default that runs embedded: SQLite and LMDB under `./.sluice/`, no NATS.
 */
export const SluiceConfigSchema = z
  .strictObject({
    node: z
      .strictObject({
        id: NameSchema.default('local'),
        host: z.string().min(1).default('127.0.0.1'),
        port: z.number().int().min(0).max(65_535).default(7070),
        advertisedUrl: UrlString.optional(),
      })
      .prefault({}),
    cluster: z.strictObject({ name: NameSchema.default('sluice') }).prefault({}),
    store: z
      .string()
      .min(1)
      .refine(
        (s) => s.startsWith('sqlite:') || s.startsWith('postgres://') || s.startsWith('postgresql://'),
        {
          message: 'must be "sqlite:<path>" or a postgres:// URL',
        },
      )
      .default('sqlite:./.sluice/store.db'),
    nats: NatsConfigSchema.optional(),
    backplane: z
      .strictObject({ strategy: z.enum(['auto', 'nats', 'direct', 'single']).default('auto') })
      .prefault({}),
    dataDir: z.string().min(1).default('./.sluice'),
    files: z.strictObject({ roots: z.array(z.string().min(1)).default([]) }).prefault({}),
    connections: refuseProtoKey(z.record(NameSchema, ConnectionConfigSchema)).default({}),
    api: z
      .strictObject({
        host: z.string().min(1).default('127.0.0.1'),
        port: z.number().int().min(0).max(65_535).default(8080),
        auth: JwtAuthSchema.optional(),
        cors: z.strictObject({ origins: z.union([z.literal(true), z.array(z.string())]) }).optional(),
        reconcileMs: z.number().int().min(100).max(600_000).default(5_000),
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
            /** Most concurrent subscribers per api-server (more → 503). */
            maxSubscribers: z.number().int().min(1).max(1_000_000).default(10_000),
          })
          .prefault({}),
      })
      .prefault({}),
    control: z.strictObject({ auth: ControlAuthSchema.optional() }).prefault({}),
    limits: LimitsSchema.prefault({}),
    cache: z
      .strictObject({
        gcGraceMs: z
          .number()
          .int()
          .min(0)
          .max(7 * 24 * 3_600_000)
          .default(60_000),
        scanCap: z.number().int().min(1).max(100_000_000).default(100_000),
        /** Each generation's change log (what change feeds resume from), trimmed at every commit. */
        changes: z
          .strictObject({
            /** Most log entries kept per generation (the newest transaction is always kept whole). */
            retainRecords: z.number().int().min(1).max(1_000_000_000).default(100_000),
            /** Transactions older than this are dropped (0 = no age limit). */
            retainMs: z
              .number()
              .int()
              .min(0)
              .max(365 * 24 * 3_600_000)
              .default(24 * 3_600_000),
          })
          .prefault({}),
      })
      .prefault({}),
    pipeline: z
      .strictObject({
        commitEveryRecords: z.number().int().min(1).max(10_000_000).default(10_000),
        commitEveryMs: z.number().int().min(10).max(3_600_000).default(1_000),
      })
      .prefault({}),
    endpoints: z
      .array(EndpointConfigSchema)
      .max(256)
      .default([])
      .superRefine((endpoints, ctx) => {
        const seen = new Set<string>();
        endpoints.forEach((e, i) => {
          if (seen.has(e.name))
            ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `duplicate endpoint "${e.name}"` });
          seen.add(e.name);
        });
      }),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  })
  // An endpoint's source must name a connection that exists and has the right type: caught at start (and by
  // `--check`), not when the pipeline first runs.
  .superRefine((config, ctx) => {
    config.endpoints.forEach((endpoint, i) => {
      const source = endpoint.source as { type: string; connection?: string };
      if (source.connection === undefined) return;
      const expected = source.type === 'postgres' ? 'postgres' : source.type === 'jetstream' ? 'nats' : null;
      const connection = config.connections[source.connection];
      const path = ['endpoints', i, 'source', 'connection'];
      if (!connection)
        ctx.addIssue({
          code: 'custom',
          path,
          message: `no connection named "${source.connection}" in connections (defined: ${Object.keys(config.connections).join(', ') || 'none'})`,
        });
      else if (expected !== null && connection.type !== expected)
        ctx.addIssue({
          code: 'custom',
          path,
          message: `connection "${source.connection}" is of type ${connection.type}; a ${source.type} source needs a ${expected} connection`,
        });
    });
  });
export type SluiceConfig = z.output<typeof SluiceConfigSchema>;
export type SluiceConfigInput = z.input<typeof SluiceConfigSchema>;

/** Environment variables that override configuration keys. */
export const ENV_OVERRIDES = {
  SLUICE_NODE_ID: 'node.id',
  SLUICE_PORT: 'node.port',
  SLUICE_ADVERTISED_URL: 'node.advertisedUrl',
  SLUICE_STORE_URL: 'store',
  SLUICE_NATS_URL: 'nats',
  SLUICE_DATA_DIR: 'dataDir',
  SLUICE_FILE_ROOTS: 'files.roots',
  SLUICE_API_PORT: 'api.port',
  SLUICE_LOG_LEVEL: 'logLevel',
} as const;

const NUMERIC_PATHS = new Set(['node.port', 'api.port']);

/**
 * Sets `path` in `target`, creating missing parent objects. A parent that is present but not an object
 * (`node: 5`) is left alone, so validation reports it instead of the override silently replacing it.
 */
function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const parts = path.split('.');
  let cursor = target;
  for (const part of parts.slice(0, -1)) {
    const next = cursor[part];
    if (next === undefined || next === null) cursor[part] = {};
    else if (typeof next !== 'object' || Array.isArray(next)) return;
    cursor = cursor[part] as Record<string, unknown>;
  }
  cursor[parts[parts.length - 1]!] = value;
}

/**
 * Validates a raw configuration (parsed YAML, or `{}` for embedded defaults) after applying environment
 * overrides. A bad value throws `CONFIG_INVALID` naming the exact path, e.g. `endpoints[0].primaryKey`.
 *
 * @example
 * ```ts
 * const config = resolveConfig(YAML.parse(text) ?? {}, process.env);
 * ```
 */
export function resolveConfig(raw: unknown, env: Record<string, string | undefined> = {}): SluiceConfig {
  const base = raw === null || raw === undefined ? {} : raw;
  if (typeof base !== 'object' || Array.isArray(base)) return parseConfigOrThrow(SluiceConfigSchema, base);
  let merged: Record<string, unknown>;
  try {
    merged = structuredClone(base) as Record<string, unknown>;
  } catch (cause) {
    throw new ConfigError(
      'Invalid configuration: (root): not plain data',
      [{ path: '(root)', message: 'must be plain data (objects, arrays, strings, numbers, booleans)' }],
      { cause },
    );
  }
  for (const [variable, path] of Object.entries(ENV_OVERRIDES)) {
    const value = env[variable];
    if (value === undefined || value === '') continue;
    if (NUMERIC_PATHS.has(path)) setPath(merged, path, /^\d+$/.test(value) ? Number(value) : value);
    else if (path === 'files.roots')
      setPath(
        merged,
        path,
        value.split(':').filter((p) => p !== ''),
      );
    else setPath(merged, path, value);
  }
  const config = parseConfigOrThrow(SluiceConfigSchema, merged);
  if (config.node.advertisedUrl === undefined) {
    const host = config.node.host === '0.0.0.0' || config.node.host === '::' ? '127.0.0.1' : config.node.host;
    // An IPv6 literal needs brackets in a URL (`http://[::1]:7070`).
    const urlHost = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
    config.node.advertisedUrl = `http://${urlHost}:${config.node.port}`;
  }
  return config;
}

/** The query limits a configuration asks for. */
export function queryLimitsOf(config: SluiceConfig) {
  return {
    maxLimit: config.limits.queryLimitMax,
    defaultLimit: Math.min(config.limits.queryLimitDefault, config.limits.queryLimitMax),
    maxIn: config.limits.inMax,
    maxDepth: config.limits.depthMax,
    maxSkip: DEFAULT_QUERY_LIMITS.maxSkip,
  };
}
