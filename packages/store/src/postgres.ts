import type { Logger } from '@sluice/core';
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import type { StoreDatabase } from './schema.js';
import { redactUrl } from './url.js';

export interface PostgresOptions {
  poolSize: number;
  connectTimeoutMs: number;
  statementTimeoutMs: number;
  logger: Logger;
}

const INT8_OID = 20;

/**
 * 64-bit integers (the store's millisecond timestamps, counts) as JS numbers: every value the store keeps
 * is far below 2^53.
 */
const storeTypes: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === INT8_OID && format !== 'binary'
      ? (value: string) => Number(value)
      : pg.types.getTypeParser(oid, format as 'text')) as pg.CustomTypesConfig['getTypeParser'],
};

/**
 * Opens a pooled PostgreSQL connection for the store. Errors of idle pooled connections (a restarted or
 * terminated backend) are logged instead of crashing the process; the pool replaces those connections.
 *
 * @example
 * ```ts
 * const { db, pool } = openPostgres('postgres://sluice@db:5432/sluice', options);
 * ```
 */
export function openPostgres(
  connectionString: string,
  options: PostgresOptions,
): { db: Kysely<StoreDatabase>; pool: pg.Pool } {
  const pool = new pg.Pool({
    connectionString,
    max: options.poolSize,
    connectionTimeoutMillis: options.connectTimeoutMs,
    idleTimeoutMillis: 30_000,
    // Server-side limit, plus a client-side one for a server that stopped answering altogether.
    statement_timeout: options.statementTimeoutMs,
    query_timeout: options.statementTimeoutMs + 5_000,
    keepAlive: true,
    application_name: 'sluice-store',
    types: storeTypes,
  });
  pool.on('error', (err) => {
    options.logger.warn(
      { err: err.message, url: redactUrl(connectionString) },
      'store: an idle PostgreSQL connection failed; it will be replaced',
    );
  });
  return { db: new Kysely<StoreDatabase>({ dialect: new PostgresDialect({ pool }) }), pool };
}
