// Every configuration rule that relates one key to another, in one place. The section files only bound single
// values; these run after the sections parsed, report at the key to change, and are what `--check` and start-up
// both apply, so a file the app-server accepts is a file the api-servers accept.
import type { z } from 'zod';
import type { EndpointConfig } from './endpoints.js';
import type { SluiceConfig } from './schema.js';
import { isSqliteStore } from './store.js';

type Ctx = z.RefinementCtx;
type EndpointShape = Pick<EndpointConfig, 'primaryKey' | 'indexes' | 'fields' | 'select'>;

/** An endpoint's key and indexes name declared fields; a list projection keeps the key. */
export function checkEndpoint(endpoint: EndpointShape, ctx: Ctx): void {
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
  const select = endpoint.select;
  if (Array.isArray(select)) {
    endpoint.primaryKey.forEach((field, i) => {
      if (!select.includes(field))
        ctx.addIssue({ code: 'custom', path: ['primaryKey', i], message: `"${field}" is not selected` });
    });
  }
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
