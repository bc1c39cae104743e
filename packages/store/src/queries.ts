/**
 * The SQL statements of the store, built and compiled once per store (kysely, with the dialect's differences
 * behind `StoreDialect`). `SqlDataPlaneStore` (store.ts) runs them and owns the protocol around them; this
 * module owns only what each statement says.
 */
import { ACTIVE_STATES, canTransition, isTerminal, TERMINAL_STATES, type TransferState } from '@sluice/core';
import { type ExpressionBuilder, type Kysely, sql } from 'kysely';
import type { StoreDialect } from './dialect.js';
import { type PreparedQuery, param, prepareQuery } from './prepared.js';
import type { StoreDatabase, TransferRow } from './schema.js';
import { storeClock } from './store-clock.js';

/** The named parameters of submit's insert. */
export type InsertNames =
  | 'id'
  | 'hash'
  | 'request'
  | 'state'
  | 'nodeId'
  | 'address'
  | 'instance'
  | 'leaseMs'
  | 'now';
type StateEpoch = Pick<TransferRow, 'state' | 'epoch' | 'finishing_epoch'>;

const ACTIVE = ACTIVE_STATES as TransferState[];
const TERMINAL = TERMINAL_STATES as TransferState[];

/** The queries the store runs, compiled once per store. */
export function prepareQueries(db: Kysely<StoreDatabase>, dialect: StoreDialect) {
  const clock = storeClock(dialect);
  const getById = prepareQuery<'id', TransferRow>(
    db.selectFrom('transfers').selectAll().where('id', '=', param<string>('id')),
  );
  const stateById = prepareQuery<'id', StateEpoch>(
    db
      .selectFrom('transfers')
      .select(['state', 'epoch', 'finishing_epoch'])
      .where('id', '=', param<string>('id')),
  );
  const insertValues = {
    id: param<string>('id'),
    request_hash: param<string>('hash'),
    request: param<string>('request'),
    state: param<TransferState>('state'),
    owner_node_id: param<string>('nodeId'),
    owner_address: param<string>('address'),
    owner_instance: param<string>('instance'),
    epoch: 1,
    lease_expires_at: clock.leaseUntil,
    attempts: 1,
    retries: 0,
    error: null,
    result: null,
    checkpoint: null,
    finishing_epoch: null,
    created_at: clock.now,
    updated_at: clock.now,
  };
  // SQLite: in-process and cheap to read, so look first and insert only when absent.
  const insert = prepareQuery<InsertNames, never>(
    db
      .insertInto('transfers')
      .values(insertValues)
      .onConflict((oc) => oc.column('id').doNothing()),
  );
  // PostgreSQL submits, lookups, checkpoints and transitions run coalesced (coalesced-statements.ts).
  type OwnerChangeNames = 'id' | 'epoch' | 'nodeId' | 'address' | 'instance' | 'leaseMs' | 'now';
  const newOwner = {
    owner_node_id: param<string>('nodeId'),
    owner_address: param<string>('address'),
    owner_instance: param<string>('instance'),
    updated_at: clock.now,
  };
  const leaseExpired = (eb: ExpressionBuilder<StoreDatabase, 'transfers'>) =>
    eb.or([eb('lease_expires_at', 'is', null), eb('lease_expires_at', '<=', clock.now)]);
  /**
   * An owner change from `epoch` of an active record; with `requireExpiredLease`, only once its lease expired.
   * Without it (the backplane said "nobody runs it"), a record whose owner confirmed its finishing step at this
   * epoch changes owner only once its lease expired all the same: that owner may be publishing right now (a file
   * sink's rename), and a "nobody" cannot tell a partitioned owner from a dead one. Its own instance (an orphan
   * it runs nothing of) is exempt: it knows nothing of that run is left.
   */
  const ownerChange = (requireExpiredLease: boolean) =>
    db
      .updateTable('transfers')
      .where('id', '=', param<string>('id'))
      .where('epoch', '=', param<number>('epoch'))
      .where('state', 'in', ACTIVE)
      .where((eb) =>
        requireExpiredLease
          ? leaseExpired(eb)
          : eb.or([
              eb('finishing_epoch', 'is', null),
              eb('finishing_epoch', '<>', eb.ref('epoch')),
              leaseExpired(eb),
              eb('owner_instance', '=', param<string>('instance')),
            ]),
      );
  const takeOverQuery = (requireExpiredLease: boolean) =>
    prepareQuery<OwnerChangeNames, TransferRow>(
      ownerChange(requireExpiredLease)
        .set((eb) => ({
          ...newOwner,
          epoch: eb('epoch', '+', 1),
          attempts: eb('attempts', '+', 1),
          lease_expires_at: clock.leaseUntil,
        }))
        .returningAll(),
    );
  const takeOver = takeOverQuery(false);
  const takeOverExpired = takeOverQuery(true);
  // Owner and TERMINATED in one statement: no crash between two writes can leave the caller owning a live run.
  const terminateQuery = (requireExpiredLease: boolean) =>
    prepareQuery<Exclude<OwnerChangeNames, 'leaseMs'>, TransferRow>(
      ownerChange(requireExpiredLease)
        .set((eb) => ({
          ...newOwner,
          epoch: eb('epoch', '+', 1),
          state: 'TERMINATED' as const,
          lease_expires_at: null,
        }))
        .returningAll(),
    );
  const terminateAbandoned = terminateQuery(false);
  const terminateAbandonedExpired = terminateQuery(true);
  const transitions = new Map<
    TransferState,
    PreparedQuery<'id' | 'epoch' | 'error' | 'result' | 'now', TransferRow>
  >();
  for (const to of [...ACTIVE, ...TERMINAL]) {
    const from = [...ACTIVE, ...TERMINAL].filter((state) => canTransition(state, to));
    if (from.length === 0) continue; // nothing leads there (RECEIVED): always illegal
    transitions.set(
      to,
      prepareQuery(
        db
          .updateTable('transfers')
          .set({
            state: to,
            error: param<string | null>('error'),
            result: param<string | null>('result'),
            updated_at: clock.now,
            // A final record holds no lease: nobody may recover or heartbeat it.
            ...(isTerminal(to) ? { lease_expires_at: null } : {}),
          })
          .where('id', '=', param<string>('id'))
          .where('epoch', '=', param<number>('epoch'))
          .where('state', 'in', from)
          .returningAll(),
      ),
    );
  }
  // A checkpoint that moved is progress: the count of retryable failures starts again. (Both dialects evaluate
  // every SET expression against the row as it was, so the comparison sees the previous checkpoint.)
  const progressResetsRetries = (eb: ExpressionBuilder<StoreDatabase, 'transfers'>) =>
    eb
      .case()
      .when('checkpoint', 'is distinct from', param<string>('checkpoint'))
      .then(0)
      .else(eb.ref('retries'))
      .end();
  const saveCheckpoint = prepareQuery<'id' | 'epoch' | 'checkpoint' | 'now', never>(
    db
      .updateTable('transfers')
      .set((eb) => ({
        checkpoint: param<string>('checkpoint'),
        retries: progressResetsRetries(eb),
        updated_at: clock.now,
      }))
      .where('id', '=', param<string>('id'))
      .where('epoch', '=', param<number>('epoch'))
      .where('state', 'in', ACTIVE),
  );
  const saveCheckpointAndLease = prepareQuery<'id' | 'epoch' | 'checkpoint' | 'now' | 'leaseMs', never>(
    db
      .updateTable('transfers')
      .set((eb) => ({
        checkpoint: param<string>('checkpoint'),
        retries: progressResetsRetries(eb),
        updated_at: clock.now,
        lease_expires_at: clock.leaseUntil,
      }))
      .where('id', '=', param<string>('id'))
      .where('epoch', '=', param<number>('epoch'))
      .where('state', 'in', ACTIVE),
  );
  // The fenced finishing step: confirms the epoch, marks the record as finishing at it and renews the lease (a
  // null `leaseMs` keeps it as it is).
  const finishing = prepareQuery<'id' | 'epoch' | 'now' | 'leaseMs', never>(
    db
      .updateTable('transfers')
      .set({
        finishing_epoch: param<number>('epoch'),
        updated_at: clock.now,
        lease_expires_at: sql<number>`coalesce(${clock.leaseUntil}, ${sql.ref('lease_expires_at')})`,
      })
      .where('id', '=', param<string>('id'))
      .where('epoch', '=', param<number>('epoch'))
      .where('state', 'in', ACTIVE),
  );
  const recordRetry = prepareQuery<'id' | 'epoch' | 'now', TransferRow>(
    db
      .updateTable('transfers')
      .set((eb) => ({ retries: eb('retries', '+', 1), updated_at: clock.now }))
      .where('id', '=', param<string>('id'))
      .where('epoch', '=', param<number>('epoch'))
      .where('state', 'in', ACTIVE)
      .returningAll(),
  );
  type HeartbeatNames = 'nodeId' | 'instance' | 'leaseMs' | 'now';
  /** The active rows of one owner instance. */
  const ownedBy = () =>
    db
      .selectFrom('transfers')
      .select('id')
      .where('owner_instance', '=', param<string>('instance'))
      .where('owner_node_id', '=', param<string>('nodeId'))
      .where('state', 'in', ACTIVE);
  const heartbeat =
    dialect === 'postgres'
      ? // Extend what it can lock at once, skipping rows another session holds: one held row (a takeover or a
        // terminate in flight, an operator's open transaction) would otherwise stall the statement — and the
        // leases of every other transfer of the owner with it. The rows it owned as the statement began but
        // could not lock come back with `extended` false: held, not lost. A row whose holder committed a change
        // of owner is re-checked when locked (FOR UPDATE) and so is not extended.
        prepareQuery<HeartbeatNames, { id: string; extended: boolean }>(
          db
            .with('renewed', (qc) =>
              qc
                .updateTable('transfers as t')
                .set({ lease_expires_at: clock.leaseUntil })
                .from(ownedBy().forUpdate().skipLocked().as('c'))
                .whereRef('t.id', '=', 'c.id')
                .returning('t.id'),
            )
            .with('owned', () => ownedBy())
            .selectFrom('renewed')
            .select(['renewed.id', sql<boolean>`true`.as('extended')])
            .unionAll((eb) =>
              eb
                .selectFrom('owned')
                .select(['owned.id', sql<boolean>`false`.as('extended')])
                .where('owned.id', 'not in', eb.selectFrom('renewed').select('renewed.id')),
            ),
        )
      : // SQLite: one writer at a time, no row locks — the statement waits for the database's write lock.
        prepareQuery<HeartbeatNames, { id: string; extended: boolean }>(
          db
            .updateTable('transfers')
            .set({ lease_expires_at: clock.leaseUntil })
            .where('owner_instance', '=', param<string>('instance'))
            .where('owner_node_id', '=', param<string>('nodeId'))
            .where('state', 'in', ACTIVE)
            .returning(['id', sql<boolean>`1`.as('extended')]),
        );
  const release = prepareQuery<'id' | 'epoch' | 'now', never>(
    db
      .updateTable('transfers')
      .set({ lease_expires_at: clock.now, updated_at: clock.now })
      .where('id', '=', param<string>('id'))
      .where('epoch', '=', param<number>('epoch'))
      .where('state', 'in', ACTIVE),
  );
  const recoverSet = {
    owner_node_id: param<string>('nodeId'),
    owner_address: param<string>('address'),
    owner_instance: param<string>('instance'),
    lease_expires_at: clock.leaseUntil,
    updated_at: clock.now,
  };
  type RecoverNames = 'nodeId' | 'address' | 'instance' | 'leaseMs' | 'now' | 'limit';
  /** The ids a sweep takes: active rows whose lease has expired, oldest lease first, at most `limit`. */
  const expiredBatch = () =>
    db
      .selectFrom('transfers')
      .select('id')
      .where('state', 'in', ACTIVE)
      .where('lease_expires_at', '<=', clock.now)
      .orderBy('lease_expires_at')
      .orderBy('id')
      .limit(param<number>('limit'));
  const recover =
    dialect === 'postgres'
      ? // Lock the oldest expired rows, skipping rows another sweeper holds: no row goes to two sweepers,
        // and a row committed by another sweeper meanwhile is re-checked (its lease is no longer expired).
        prepareQuery<RecoverNames, TransferRow>(
          db
            .updateTable('transfers as t')
            .set((eb) => ({
              ...recoverSet,
              epoch: eb('t.epoch', '+', 1),
              attempts: eb('t.attempts', '+', 1),
            }))
            .from(expiredBatch().forUpdate().skipLocked().as('c'))
            .whereRef('t.id', '=', 'c.id')
            .returningAll('t'),
        )
      : // SQLite: one statement holds the database's single write lock from the pick to the update.
        prepareQuery<RecoverNames, TransferRow>(
          db
            .updateTable('transfers')
            .set((eb) => ({
              ...recoverSet,
              epoch: eb('epoch', '+', 1),
              attempts: eb('attempts', '+', 1),
            }))
            .where('id', 'in', expiredBatch())
            .returningAll(),
        );
  return {
    getById,
    stateById,
    insert,
    takeOver,
    takeOverExpired,
    terminateAbandoned,
    terminateAbandonedExpired,
    transitions,
    saveCheckpoint,
    saveCheckpointAndLease,
    finishing,
    recordRetry,
    heartbeat,
    release,
    recover,
  };
}

export type Queries = ReturnType<typeof prepareQueries>;
