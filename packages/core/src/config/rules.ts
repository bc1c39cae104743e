// Every configuration rule that relates one key to another, in one place. The section files only bound single
// values; these run after the sections parsed, report at the key to change, and are what `--check` and start-up
// both apply, so a file the app-server accepts is a file the api-servers accept.
import type { z } from 'zod';
import { defaultReplicationName, postgresCapture } from '../addresses.js';
import { filterSchema } from '../query.js';
import type { EndpointConfig, FieldType } from './endpoints.js';
import { queryLimitsOf } from './query.js';
import type { SluiceConfig } from './schema.js';
import { isSqliteStore } from './store.js';

type Ctx = z.RefinementCtx;
type EndpointShape = Pick<EndpointConfig, 'primaryKey' | 'indexes' | 'fields' | 'select'>;

/** Field types a primary-key field may have (a key is a scalar). */
const KEY_FIELD_TYPES: ReadonlySet<FieldType> = new Set([
  'string',
  'integer',
  'number',
  'boolean',
  'timestamp',
]);

/**
 * The rules of a cache's key and indexes — one definition for `sluice.yaml`'s endpoints (so `--check` and start-up
 * refuse what the cache would) and for `@sluice/cache`'s schema: no field listed twice in the key or an index, no
 * index twice, and, where the fields are declared, key and index fields among them and key fields of a key type.
 *
 * @example
 * ```ts
 * z.object({ primaryKey: …, indexes: …, fields: … }).superRefine(checkKeyAndIndexes);
 * ```
 */
export function checkKeyAndIndexes(
  schema: {
    primaryKey: readonly string[];
    indexes: readonly (readonly string[])[];
    fields?: Readonly<Record<string, FieldType>> | undefined;
  },
  ctx: Ctx,
): void {
  const fields = schema.fields;
  // Own keys only: "toString" must not count as declared because every object inherits it.
  const typeOf = (field: string) => (fields && Object.hasOwn(fields, field) ? fields[field] : undefined);
  const listedOnce = (list: readonly string[], path: (string | number)[]) => {
    const seen = new Set<string>();
    for (const field of list) {
      if (seen.has(field)) ctx.addIssue({ code: 'custom', path, message: `"${field}" is listed twice` });
      seen.add(field);
    }
  };
  listedOnce(schema.primaryKey, ['primaryKey']);
  schema.primaryKey.forEach((field, i) => {
    if (!fields) return;
    const type = typeOf(field);
    if (type === undefined)
      ctx.addIssue({ code: 'custom', path: ['primaryKey', i], message: `"${field}" is not in fields` });
    else if (!KEY_FIELD_TYPES.has(type))
      ctx.addIssue({
        code: 'custom',
        path: ['primaryKey', i],
        message: `"${field}" has type ${type}, which cannot be part of a key`,
      });
  });
  const indexes = new Map<string, number>();
  schema.indexes.forEach((index, i) => {
    const id = index.join(',');
    const first = indexes.get(id);
    if (first !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['indexes', i],
        message: `duplicate index (as indexes[${first}])`,
      });
    else indexes.set(id, i);
    listedOnce(index, ['indexes', i]);
    index.forEach((field, j) => {
      if (fields && typeOf(field) === undefined)
        ctx.addIssue({ code: 'custom', path: ['indexes', i, j], message: `"${field}" is not in fields` });
    });
  });
}

/** An endpoint's key and indexes follow the cache's rules; a projection keeps the key. */
export function checkEndpoint(endpoint: EndpointShape, ctx: Ctx): void {
  checkKeyAndIndexes(endpoint, ctx);
  const select = endpoint.select;
  if (select === undefined) return;
  // A list keeps the fields it names; a map keeps (and names) its keys.
  const kept = (field: string) =>
    Array.isArray(select) ? select.includes(field) : Object.hasOwn(select, field);
  endpoint.primaryKey.forEach((field, i) => {
    if (!kept(field))
      ctx.addIssue({ code: 'custom', path: ['primaryKey', i], message: `"${field}" is not selected` });
  });
}

/** Endpoint names are unique (each is also its alias). */
export function checkEndpointNames(endpoints: ReadonlyArray<{ name: string }>, ctx: Ctx): void {
  const seen = new Set<string>();
  endpoints.forEach((e, i) => {
    if (seen.has(e.name))
      ctx.addIssue({ code: 'custom', path: [i, 'name'], message: `duplicate endpoint "${e.name}"` });
    seen.add(e.name);
  });
}

/** The rules across sections of a whole `sluice.yaml`. */
export function checkHost(config: SluiceConfig, ctx: Ctx): void {
  checkEndpointConnections(config, ctx);
  checkBackplane(config, ctx);
  checkTransferTimings(config, ctx);
  checkListenPorts(config, ctx);
  checkAuthSecrets(config, ctx);
  checkEndpointFilters(config, ctx);
  checkStreamBounds(config, ctx);
  checkReplicationSlots(config, ctx);
}

/**
 * Each endpoint that reads logical replication has slots of its own (and publications of the same names): its
 * configured `slot`, else two names derived from the node id and its name (`defaultReplicationName`, the second
 * for a green generation). Derived names lower-case the endpoint's name and turn `-` and `.` into `_`, so endpoints
 * `my-items` and `my_items` named one slot: each took it from the other, and neither could keep streaming. Refused
 * at the later endpoint's key, naming the slot and the endpoint it collides with.
 */
function checkReplicationSlots(config: Pick<SluiceConfig, 'node' | 'endpoints'>, ctx: Ctx): void {
  const readers = new Map<string, string>();
  config.endpoints.forEach((endpoint, i) => {
    const source = endpoint.source;
    if (source.type !== 'postgres' || postgresCapture(source, 'endpoint') !== 'replication') return;
    const own = source.slot !== undefined;
    const slots = own
      ? [source.slot as string]
      : [
          defaultReplicationName(config.node.id, `${endpoint.name}.source`),
          defaultReplicationName(config.node.id, `${endpoint.name}.source_b`),
        ];
    const taken = slots.find((slot) => readers.has(slot));
    if (taken !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: own ? ['endpoints', i, 'source', 'slot'] : ['endpoints', i, 'name'],
        message: `reads replication slot ${taken}, as endpoint ${JSON.stringify(readers.get(taken))} does (slot names are lower-cased, with "-" and "." turned into "_"): rename one endpoint, or give one a source.slot and source.publication of its own`,
      });
      return;
    }
    for (const slot of slots) readers.set(slot, endpoint.name);
  });
}

/**
 * The query API and the control API verify JWTs with secrets of their own. The control API grants whatever a valid
 * JWT asks (it reads no claim but `exp`), so with one secret for both every query-API token — a reader's, with its
 * endpoint list and row filters — was an operator's token there: every endpoint, transfer and switch. Reported at
 * the control API's key, never with the secret in the message.
 */
function checkAuthSecrets(config: Pick<SluiceConfig, 'api' | 'control'>, ctx: Ctx): void {
  const query = config.api.auth?.jwtSecret;
  const control = config.control.auth?.jwtSecret;
  if (query === undefined || control === undefined || query !== control) return;
  ctx.addIssue({
    code: 'custom',
    path: ['control', 'auth', 'jwtSecret'],
    message:
      "is api.auth.jwtSecret too: every query-API token (a reader's, whatever its endpoints and row filters) would be a control token; give each API a secret of its own",
  });
}

/**
 * Long-lived streams have a process bound and a per-client bound under it (`@sluice/http`'s `StreamAdmission`). The
 * process bound is checked first and one client never holds more streams than are open, so a per-client bound
 * above the process bound could never refuse: the operator who wrote it asked for a bound that does nothing (or
 * swapped the two). Refused at the per-client key, naming both.
 */
function checkStreamBounds(config: Pick<SluiceConfig, 'api' | 'control'>, ctx: Ctx): void {
  const bounds = [
    {
      path: ['api', 'changes', 'maxPerClient'],
      perClient: config.api.changes.maxPerClient,
      max: config.api.changes.maxSubscribers,
      maxKey: 'api.changes.maxSubscribers',
      holds: 'feeds than the api-server accepts',
    },
    {
      path: ['control', 'maxStreamsPerClient'],
      perClient: config.control.maxStreamsPerClient,
      max: config.control.maxStreams,
      maxKey: 'control.maxStreams',
      holds: 'endpoint streams than the app-server accepts',
    },
  ];
  for (const { path, perClient, max, maxKey, holds } of bounds)
    if (perClient > max)
      ctx.addIssue({
        code: 'custom',
        path,
        message: `${perClient} is more than ${maxKey} (${max}): one client can never hold more ${holds} in all, so this bound would never refuse; lower it or raise ${maxKey}`,
      });
}

/**
 * An endpoint's `filter` is held to the query limits the file sets (`query.maxIn`, `query.maxDepth`), as every
 * query is — one definition of a filter's bounds, so raising them applies to both and lowering them refuses a
 * configured filter past them at its path.
 */
function checkEndpointFilters(config: Pick<SluiceConfig, 'endpoints' | 'query'>, ctx: Ctx): void {
  let schema: ReturnType<typeof filterSchema> | undefined;
  config.endpoints.forEach((endpoint, i) => {
    if (endpoint.filter === undefined) return;
    schema ??= filterSchema(queryLimitsOf(config));
    const parsed = schema.safeParse(endpoint.filter);
    if (parsed.success) return;
    for (const issue of parsed.error.issues)
      ctx.addIssue({
        code: 'custom',
        path: ['endpoints', i, 'filter', ...issue.path],
        message: issue.message,
      });
  });
}

/** Addresses that listen on every interface, so they meet any other address of the host. */
const EVERY_INTERFACE: ReadonlySet<string> = new Set(['0.0.0.0', '::', '[::]']);

/**
 * The app-server and the api-servers of a host read one file: on one port and a shared address, whichever starts
 * second could only fail with the port taken. Said here, at the key to change, by `--check` and before anything
 * starts. Port 0 (the system picks one) never clashes; `--port`/`--host` of an api-server are not seen here.
 */
function checkListenPorts(config: Pick<SluiceConfig, 'node' | 'api'>, ctx: Ctx): void {
  const { node, api } = config;
  if (node.port === 0 || node.port !== api.port) return;
  const shared = node.host === api.host || EVERY_INTERFACE.has(node.host) || EVERY_INTERFACE.has(api.host);
  if (shared)
    ctx.addIssue({
      code: 'custom',
      path: ['api', 'port'],
      message: `${api.port} is node.port too: the app-server and the api-servers of a host need ports of their own`,
    });
}

/**
 * An endpoint's source must name a connection that exists and has the right type: caught at start (and by
 * `--check`), not when the pipeline first runs.
 */
function checkEndpointConnections(config: Pick<SluiceConfig, 'endpoints' | 'connections'>, ctx: Ctx): void {
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
}

/** A forced backplane strategy must be one this configuration can run. */
function checkBackplane(config: Pick<SluiceConfig, 'backplane' | 'nats' | 'store'>, ctx: Ctx): void {
  if (config.backplane.strategy === 'nats' && config.nats === undefined)
    ctx.addIssue({ code: 'custom', path: ['nats'], message: 'required when backplane.strategy is "nats"' });
  if (config.backplane.strategy === 'single' && !isSqliteStore(config.store))
    ctx.addIssue({
      code: 'custom',
      path: ['backplane', 'strategy'],
      message: '"single" needs a sqlite: store; use "direct" or "nats"',
    });
}

/** A heartbeat must come before the lease it extends runs out, else a healthy owner loses its transfers. */
function checkTransferTimings(config: Pick<SluiceConfig, 'transfers'>, ctx: Ctx): void {
  const { heartbeatMs, leaseMs } = config.transfers;
  if (heartbeatMs >= leaseMs)
    ctx.addIssue({
      code: 'custom',
      path: ['transfers', 'heartbeatMs'],
      message: `must be less than transfers.leaseMs (${leaseMs})`,
    });
}
