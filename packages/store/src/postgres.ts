import type { Logger } from '@sluice/core';
import { Kysely, PostgresDialect, type PostgresPool, type PostgresPoolClient } from 'kysely';
import pg from 'pg';
import { isUnavailableError } from './errors.js';
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
 * The SQL texts the store runs over and over, each with a stable name: pg then sends them as named
 * prepared statements, parsed and planned once per connection instead of on every call.
 */
export class StatementNames {
  readonly #names = new Map<string, string>();

  register(sql: string): void {
    if (!this.#names.has(sql)) this.#names.set(sql, `sluice_store_${this.#names.size + 1}`);
  }

  nameOf(sql: string): string | undefined {
    return this.#names.get(sql);
  }
}

/**
 * The pg pool as kysely sees it, except that a connection whose query failed because the connection died
 * (terminated backend, server restart) is destroyed on release instead of going back to the pool, where the
 * next operation would pick it up and fail too.
 */
class DiscardingPool implements PostgresPool {
  readonly #pool: pg.Pool;
  readonly #names: StatementNames;
  readonly #clients = new WeakMap<pg.PoolClient, PostgresPoolClient>();

  constructor(pool: pg.Pool, names: StatementNames) {
    this.#pool = pool;
    this.#names = names;
  }

  async connect(): Promise<PostgresPoolClient> {
    const client = await this.#pool.connect();
    let wrapped = this.#clients.get(client);
    if (wrapped === undefined) {
      wrapped = discardingClient(client, this.#names);
      this.#clients.set(client, wrapped);
    }
    return wrapped;
  }

  end(): Promise<void> {
    return this.#pool.end();
  }
}

function discardingClient(client: pg.PoolClient, names: StatementNames): PostgresPoolClient {
  let broken = false;
  const query = (...args: unknown[]) => {
    const [text, values] = args;
    const name = typeof text === 'string' && Array.isArray(values) ? names.nameOf(text) : undefined;
    const result =
      name === undefined
        ? (client.query as (...a: unknown[]) => unknown)(...args)
        : client.query({ name, text: text as string, values: values as unknown[] });
    if (result instanceof Promise) {
      return result.catch((err: unknown) => {
        if (isUnavailableError(err)) broken = true;
        throw err;
      });
    }
    return result;
  };
  return {
    query: query as PostgresPoolClient['query'],
    release(destroy?: boolean) {
      const discard =
        destroy === true || broken || !(client as unknown as { _queryable: boolean })._queryable;
      broken = false;
      client.release(discard ? true : undefined);
    },
  };
}

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
): { db: Kysely<StoreDatabase>; pool: pg.Pool; statements: StatementNames } {
  const statements = new StatementNames();
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
  // A connection that dies while checked out emits 'error' on the client itself; without a listener that
  // would crash the process. The query running on it fails anyway, which is what the caller sees.
  pool.on('connect', (client) => {
    client.on('error', (err) => {
      options.logger.debug({ err: err.message }, 'store: a PostgreSQL connection failed');
    });
  });
  return {
    db: new Kysely<StoreDatabase>({
      dialect: new PostgresDialect({ pool: new DiscardingPool(pool, statements) }),
    }),
    pool,
    statements,
  };
}
