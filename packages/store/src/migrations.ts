import { type Kysely, type Migration, type MigrationProvider, Migrator, sql } from 'kysely';
import type { StoreDialect } from './dialect.js';

/**
 * The store's schema history, shipped in code (no file-system lookup at run time). Never edit a migration
 * that has shipped; add a new one with a later name.
 */
export function storeMigrations(dialect: StoreDialect): Record<string, Migration> {
  // Millisecond timestamps need 64 bits on PostgreSQL; SQLite integers are 64-bit already.
  const millis = dialect === 'postgres' ? 'bigint' : 'integer';
  return {
    '0001_transfers_and_nodes': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('transfers')
          .addColumn('id', 'text', (c) => c.primaryKey())
          .addColumn('request_hash', 'text', (c) => c.notNull())
          .addColumn('request', 'text', (c) => c.notNull())
          .addColumn('state', 'text', (c) => c.notNull())
          .addColumn('owner_node_id', 'text')
          .addColumn('owner_address', 'text')
          .addColumn('owner_instance', 'text')
          .addColumn('epoch', 'integer', (c) => c.notNull())
          .addColumn('lease_expires_at', millis)
          .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
          .addColumn('error', 'text')
          .addColumn('result', 'text')
          .addColumn('checkpoint', 'text')
          .addColumn('created_at', millis, (c) => c.notNull())
          .addColumn('updated_at', millis, (c) => c.notNull())
          .addCheckConstraint(
            'transfers_state_check',
            sql`state in ('RECEIVED', 'IN_PROGRESS', 'COMPLETED', 'FAILED', 'TERMINATED')`,
          )
          .addCheckConstraint('transfers_epoch_check', sql`epoch >= 1`)
          .execute();
        // The sweeper's lookup: expired leases of active transfers, oldest first.
        await db.schema
          .createIndex('transfers_state_lease_idx')
          .on('transfers')
          .columns(['state', 'lease_expires_at'])
          .execute();
        // Listing by owner (operators, the direct backplane) with id-ordered pagination.
        await db.schema
          .createIndex('transfers_owner_idx')
          .on('transfers')
          .columns(['owner_node_id', 'id'])
          .execute();
        // The heartbeat: every transfer of one owner incarnation.
        await db.schema
          .createIndex('transfers_owner_instance_idx')
          .on('transfers')
          .column('owner_instance')
          .execute();
        // Purge: terminal records by age.
        await db.schema
          .createIndex('transfers_state_updated_idx')
          .on('transfers')
          .columns(['state', 'updated_at'])
          .execute();
        await db.schema
          .createTable('nodes')
          .addColumn('node_id', 'text', (c) => c.primaryKey())
          .addColumn('address', 'text', (c) => c.notNull())
          .addColumn('instance_id', 'text', (c) => c.notNull())
          .addColumn('started_at', millis, (c) => c.notNull())
          .addColumn('last_seen_at', millis, (c) => c.notNull())
          .execute();
      },
      async down(db: Kysely<unknown>) {
        await db.schema.dropTable('nodes').execute();
        await db.schema.dropTable('transfers').execute();
      },
    },
    // Retryable failures counted apart from owner changes: `attempts` also counts every takeover, so a transfer
    // whose owners kept being killed had used up its retry budget before its first failure of its own.
    '0002_transfer_retries': {
      async up(db: Kysely<unknown>) {
        await db.schema
          .alterTable('transfers')
          .addColumn('retries', 'integer', (c) => c.notNull().defaultTo(0))
          .execute();
      },
      async down(db: Kysely<unknown>) {
        await db.schema.alterTable('transfers').dropColumn('retries').execute();
      },
    },
    // The epoch whose owner passed its fenced finishing step (about to publish what cannot be taken back): a
    // takeover or terminate on a "nobody" must not land between that step and the publish, so it waits for the
    // lease of such a record (docs/fencing.md § Finishing holds the record).
    '0003_transfer_finishing': {
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('transfers').addColumn('finishing_epoch', 'integer').execute();
      },
      async down(db: Kysely<unknown>) {
        await db.schema.alterTable('transfers').dropColumn('finishing_epoch').execute();
      },
    },
  };
}

/**
 * Fails (`42P01` / `no such table`, which the store maps to `STORE_UNAVAILABLE`, reason `schema-missing`) unless
 * every table the store works on is there; reads no row.
 */
export async function checkSchema(db: Kysely<unknown>): Promise<void> {
  await sql`select 1 from transfers cross join nodes where 1 = 0`.execute(db);
}

/** Provides the in-code migrations to kysely's Migrator. */
class InCodeMigrationProvider implements MigrationProvider {
  constructor(private readonly migrations: Record<string, Migration>) {}
  async getMigrations(): Promise<Record<string, Migration>> {
    return this.migrations;
  }
}

export const MIGRATION_TABLE = 'sluice_store_migration';
export const MIGRATION_LOCK_TABLE = 'sluice_store_migration_lock';
/** Arbitrary but fixed key of the PostgreSQL advisory lock that serializes migrating nodes. */
export const PG_MIGRATION_LOCK_KEY = 0x51_7c_e5_70;

/** Serializes migrations of one SQLite file inside this process (better-sqlite3 waits synchronously). */
const sqliteMigrationChains = new Map<string, Promise<unknown>>();

/**
 * Brings the schema to the latest version. Safe when several nodes (processes, or store instances in one
 * process) migrate at once: on PostgreSQL a session advisory lock serializes them; on SQLite an immediate
 * transaction holds the file's write lock for the whole run.
 */
export async function migrateToLatest(
  db: Kysely<unknown>,
  dialect: StoreDialect,
  lockKey: string,
): Promise<string[]> {
  const migrations = storeMigrations(dialect);
  if (dialect === 'postgres') {
    return db.connection().execute(async (conn) => {
      await sql`select pg_advisory_lock(${sql.lit(PG_MIGRATION_LOCK_KEY)})`.execute(conn);
      try {
        return await runMigrator(conn, migrations, false);
      } finally {
        await sql`select pg_advisory_unlock(${sql.lit(PG_MIGRATION_LOCK_KEY)})`.execute(conn);
      }
    });
  }
  const previous = sqliteMigrationChains.get(lockKey) ?? Promise.resolve();
  const run = previous
    .catch(() => undefined)
    .then(() =>
      db.connection().execute(async (conn) => {
        await sql`begin immediate`.execute(conn);
        try {
          const applied = await runMigrator(conn, migrations, true);
          await sql`commit`.execute(conn);
          return applied;
        } catch (err) {
          await sql`rollback`.execute(conn).catch(() => undefined);
          throw err;
        }
      }),
    );
  sqliteMigrationChains.set(lockKey, run);
  try {
    return await run;
  } finally {
    if (sqliteMigrationChains.get(lockKey) === run) sqliteMigrationChains.delete(lockKey);
  }
}

async function runMigrator(
  db: Kysely<unknown>,
  migrations: Record<string, Migration>,
  disableTransactions: boolean,
): Promise<string[]> {
  const migrator = new Migrator({
    db,
    provider: new InCodeMigrationProvider(migrations),
    migrationTableName: MIGRATION_TABLE,
    migrationLockTableName: MIGRATION_LOCK_TABLE,
    disableTransactions,
  });
  const { error, results } = await migrator.migrateToLatest();
  if (error) throw error;
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
