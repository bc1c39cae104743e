import {
  type Clock,
  type DataPlaneStore,
  type HeartbeatOutcome,
  IdempotencyConflictError,
  IllegalTransitionError,
  InternalError,
  type ListTransfersInput,
  type Logger,
  matchesStoredRequest,
  type NodeInfo,
  type OwnerChangeOptions,
  type OwnerIdentity,
  StaleEpochError,
  type SubmitInput,
  type SubmitOutcome,
  TERMINAL_STATES,
  TransferNotFoundError,
  type TransferPage,
  type TransferRecord,
  type TransferState,
  type TransitionInput,
} from '@sluice/core';
import { type CompiledQuery, type Kysely, sql } from 'kysely';
import { CoalescedStatements } from './coalesced-statements.js';
import type { StoreDialect } from './dialect.js';
import { TransferFinalError } from './errors.js';
import { checkSchema } from './migrations.js';
import { type NodeRegistration, NodeTable } from './nodes.js';
import { OperationGuard } from './operation-guard.js';
import { prepareQueries, type Queries } from './queries.js';
import { rowToRecord } from './record.js';
import { LeaseCondition, refusalOf } from './refusal.js';
import type { StoreDatabase } from './schema.js';
import { storeClock } from './store-clock.js';
import { prepareSubmit, type SubmitValues } from './submit-input.js';
import {
  boundedJson,
  encodeCursor,
  STORE_LIMITS,
  validAgeMs,
  validEpoch,
  validId,
  validLeaseMs,
  validLimit,
  validListInput,
  validOwner,
  validTransitionInput,
} from './validate.js';

type Row<T> = { rows: T[]; numAffectedRows?: bigint };

/** A submit retries when the row vanished between its insert and its read (purged at that instant). */
const SUBMIT_ATTEMPTS = 3;

/**
 * The durable {@link DataPlaneStore} on kysely, for SQLite (embedded) and PostgreSQL (clusters). Every
 * operation is one atomic statement; every owner write is conditional on the caller's epoch. Open it with
 * `openStore()`.
 *
 * @example
 * ```ts
 * await using store = await openStore('sqlite:./.sluice/store.db');
 * const { record, created } = await store.submit({ request, requestHash: requestHash(request), owner, leaseMs: 30_000 });
 * if (created) await store.transition(record.id, record.epoch, { to: 'IN_PROGRESS' });
 * ```
 */
export class SqlDataPlaneStore implements DataPlaneStore {
  readonly dialect: StoreDialect;
  readonly #db: Kysely<StoreDatabase>;
  /** Where plain reads go: SQLite's read-only connection (sqlite.ts `openSqliteReader`), else `#db`. */
  readonly #reader: Kysely<StoreDatabase>;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #q: Queries;
  readonly #clockSql: ReturnType<typeof storeClock>;
  readonly #nodes: NodeTable;
  readonly #guard: OperationGuard;
  /** PostgreSQL: concurrent lookups, submits, checkpoint saves and transitions share statements (coalesced-statements.ts). */
  readonly #coalesced: CoalescedStatements | null;
  readonly #releaseLock: (() => void) | undefined;

  /** @internal Use `openStore()`: it validates the URL and runs the migrations. */
  constructor(
    db: Kysely<StoreDatabase>,
    dialect: StoreDialect,
    clock: Clock,
    logger: Logger,
    statements?: { register(sql: string): void },
    /** Releases the claim on the store's file (`openStore`'s `exclusive`), after the database is closed. */
    releaseLock?: () => void,
    /** A connection for plain reads that must not queue behind writes (SQLite); default `db`. */
    reader?: Kysely<StoreDatabase>,
  ) {
    this.#db = db;
    this.#reader = reader ?? db;
    this.#releaseLock = releaseLock;
    this.dialect = dialect;
    this.#clock = clock;
    this.#logger = logger;
    this.#q = prepareQueries(db, dialect);
    this.#clockSql = storeClock(dialect);
    this.#nodes = new NodeTable(db, this.#clockSql);
    this.#guard = new OperationGuard(logger);
    this.#coalesced = dialect === 'postgres' ? new CoalescedStatements(db, statements) : null;
    if (statements) {
      const { transitions, ...rest } = this.#q;
      for (const query of [...Object.values(rest), ...transitions.values()]) statements.register(query.sql);
    }
  }

  /** True once `close()` was called. */
  get closed(): boolean {
    return this.#guard.closed;
  }

  async submit(input: SubmitInput): Promise<SubmitOutcome> {
    return this.#run('submit', async () => {
      const { request, requestHash, values, fresh } = prepareSubmit(input, () => this.#now());
      for (let attempt = 1; ; attempt++) {
        const outcome =
          this.dialect === 'postgres'
            ? await this.#submitPostgres(values)
            : await this.#submitSqlite(values, fresh);
        if (outcome) {
          if (!outcome.created && !matchesStoredRequest(outcome.record, requestHash)) {
            throw new IdempotencyConflictError(request.id);
          }
          return outcome;
        }
        if (attempt >= SUBMIT_ATTEMPTS) {
          throw new InternalError(`transfer "${request.id}" kept vanishing between insert and read`);
        }
      }
    });
  }

  async #submitSqlite(values: SubmitValues, fresh: TransferRecord): Promise<SubmitOutcome | null> {
    const existing = await this.#one(this.#q.getById.bind({ id: values.id }));
    if (existing) return { record: rowToRecord(existing), created: false };
    const inserted = await this.#exec(this.#q.insert.bind(values));
    // The insert wrote exactly the values of `fresh`.
    if (inserted.numAffectedRows === 1n) return { record: fresh, created: true };
    const winner = await this.#one(this.#q.getById.bind({ id: values.id }));
    return winner ? { record: rowToRecord(winner), created: false } : null;
  }

  async #submitPostgres(values: SubmitValues): Promise<SubmitOutcome | null> {
    const row = await this.#coalesced!.submit(values);
    if (row) {
      const { created, ...record } = row;
      // The row, not `fresh`: its lease was computed by PostgreSQL's clock (store-clock.ts).
      return { record: rowToRecord(record), created: Number(created) === 1 };
    }
    // Another node inserted the id after this statement's snapshot was taken: read it now.
    const winner = await this.#coalesced!.get(String(values.id));
    return winner ? { record: rowToRecord(winner), created: false } : null;
  }

  async takeOver(
    id: string,
    expectedEpoch: number,
    owner: OwnerIdentity,
    leaseMs: number,
    options: OwnerChangeOptions = {},
  ): Promise<TransferRecord> {
    return this.#run('takeOver', async () => {
      const values = this.#ownerChange(id, expectedEpoch, owner, leaseMs);
      const query = options.requireExpiredLease === true ? this.#q.takeOverExpired : this.#q.takeOver;
      const row = await this.#one(query.bind(values));
      if (row) return rowToRecord(row);
      throw await this.#whyRefused(values.id, values.epoch, 'a takeover', ownerChangeCondition(options));
    });
  }

  async terminateAbandoned(
    id: string,
    expectedEpoch: number,
    owner: OwnerIdentity,
    options: OwnerChangeOptions = {},
  ): Promise<TransferRecord> {
    return this.#run('terminateAbandoned', async () => {
      const values = this.#ownerChange(id, expectedEpoch, owner, 1_000);
      const query =
        options.requireExpiredLease === true ? this.#q.terminateAbandonedExpired : this.#q.terminateAbandoned;
      const row = await this.#one(query.bind(values));
      if (row) return rowToRecord(row);
      const refusal = await this.#whyRefused(
        values.id,
        values.epoch,
        'a termination',
        ownerChangeCondition(options),
      );
      // A record that is already final cannot be terminated: the state machine's error, as transition() says.
      if (refusal instanceof TransferFinalError) {
        const current = await this.#one(this.#q.stateById.bind({ id: values.id }));
        throw new IllegalTransitionError(values.id, current?.state ?? 'COMPLETED', 'TERMINATED');
      }
      throw refusal;
    });
  }

  #ownerChange(id: string, expectedEpoch: number, owner: OwnerIdentity, leaseMs: number) {
    const o = validOwner(owner);
    return {
      id: validId(id),
      epoch: validEpoch(expectedEpoch),
      nodeId: o.nodeId,
      address: o.address,
      instance: o.instanceId,
      leaseMs: validLeaseMs(leaseMs),
      now: this.#now(),
    };
  }

  async transition(id: string, epoch: number, input: TransitionInput): Promise<TransferRecord> {
    return this.#run('transition', async () => {
      const validated = { id: validId(id), epoch: validEpoch(epoch) };
      const { to, error, result } = validTransitionInput(input);
      const query = this.#q.transitions.get(to);
      if (query) {
        const row = this.#coalesced
          ? await this.#coalesced.transition(to, { ...validated, error, result })
          : await this.#one(query.bind({ ...validated, error, result, now: this.#now() }));
        if (row) return rowToRecord(row);
      }
      const current = await this.#one(this.#q.stateById.bind({ id: validated.id }));
      if (!current) throw new TransferNotFoundError(validated.id);
      if (Number(current.epoch) !== validated.epoch) {
        throw new StaleEpochError(validated.id, validated.epoch, {
          details: { epoch: Number(current.epoch) },
        });
      }
      throw new IllegalTransitionError(validated.id, current.state, to);
    });
  }

  async saveCheckpoint(id: string, epoch: number, checkpoint: unknown, leaseMs?: number): Promise<void> {
    return this.#run('saveCheckpoint', async () => {
      const validated = {
        id: validId(id),
        epoch: validEpoch(epoch),
        checkpoint: boundedJson(checkpoint, 'checkpoint', STORE_LIMITS.maxCheckpointBytes),
        now: this.#now(),
      };
      const lease = leaseMs === undefined ? null : validLeaseMs(leaseMs);
      if (this.#coalesced) {
        if (await this.#coalesced.checkpoint({ ...validated, leaseMs: lease })) return;
      } else {
        const query =
          lease === null
            ? this.#q.saveCheckpoint.bind(validated)
            : this.#q.saveCheckpointAndLease.bind({ ...validated, leaseMs: lease });
        const { numAffectedRows } = await this.#exec(query);
        if (numAffectedRows === 1n) return;
      }
      throw await this.#whyRefused(validated.id, validated.epoch, 'a checkpoint');
    });
  }

  async finishing(id: string, epoch: number, leaseMs?: number): Promise<void> {
    return this.#run('finishing', async () => {
      const validated = {
        id: validId(id),
        epoch: validEpoch(epoch),
        leaseMs: leaseMs === undefined ? null : validLeaseMs(leaseMs),
        now: this.#now(),
      };
      // One statement, not coalesced: at most one per transfer, and none when the run skips it (the shortcut).
      const { numAffectedRows } = await this.#exec(this.#q.finishing.bind(validated));
      if (numAffectedRows === 1n) return;
      throw await this.#whyRefused(validated.id, validated.epoch, 'a finishing step');
    });
  }

  async recordRetry(id: string, epoch: number): Promise<TransferRecord> {
    return this.#run('recordRetry', async () => {
      const validated = { id: validId(id), epoch: validEpoch(epoch), now: this.#now() };
      const row = await this.#one(this.#q.recordRetry.bind(validated));
      if (row) return rowToRecord(row);
      throw await this.#whyRefused(validated.id, validated.epoch, 'a retry');
    });
  }

  async heartbeat(owner: OwnerIdentity, leaseMs: number): Promise<HeartbeatOutcome> {
    return this.#run('heartbeat', async () => {
      const o = validOwner(owner);
      const { rows } = await this.#exec(
        this.#q.heartbeat.bind({
          nodeId: o.nodeId,
          instance: o.instanceId,
          leaseMs: validLeaseMs(leaseMs),
          now: this.#now(),
        }),
      );
      const extended: string[] = [];
      const held: string[] = [];
      // PostgreSQL answers a boolean, SQLite 1.
      for (const row of rows) (row.extended ? extended : held).push(row.id);
      return { extended: extended.sort(), held: held.sort() };
    });
  }

  async release(id: string, epoch: number): Promise<void> {
    return this.#run('release', async () => {
      const validated = { id: validId(id), epoch: validEpoch(epoch), now: this.#now() };
      const { numAffectedRows } = await this.#exec(this.#q.release.bind(validated));
      if (numAffectedRows === 1n) return;
      const refusal = await this.#whyRefused(validated.id, validated.epoch, 'a release');
      // Handing back a transfer that has just finished is a no-op: it holds no lease any more.
      if (refusal instanceof TransferFinalError) return;
      throw refusal;
    });
  }

  async recoverExpired(owner: OwnerIdentity, leaseMs: number, limit: number): Promise<TransferRecord[]> {
    return this.#run('recoverExpired', async () => {
      const o = validOwner(owner);
      const now = this.#now();
      const values = {
        nodeId: o.nodeId,
        address: o.address,
        instance: o.instanceId,
        leaseMs: validLeaseMs(leaseMs),
        now,
        limit: validLimit(limit, STORE_LIMITS.maxRecoverBatch),
      };
      const { rows } = await this.#exec(this.#q.recover.bind(values));
      const records = rows.map(rowToRecord);
      // Statement order is unspecified on both dialects: hand them out oldest request first.
      return records.sort(
        (a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
      );
    });
  }

  async get(id: string): Promise<TransferRecord | null> {
    return this.#run('get', async () => {
      const valid = validId(id);
      const row = this.#coalesced
        ? await this.#coalesced.get(valid)
        : (await this.#reader.executeQuery(this.#q.getById.bind({ id: valid }))).rows[0];
      return row ? rowToRecord(row) : null;
    });
  }

  async list(input?: ListTransfersInput): Promise<TransferPage> {
    return this.#run('list', async () => {
      const { state, ownerNodeId, after, limit, leaseExpired } = validListInput(input);
      let query = this.#reader
        .selectFrom('transfers')
        .selectAll()
        .orderBy('id')
        .limit(limit + 1);
      if (state !== undefined) query = query.where('state', '=', state);
      if (ownerNodeId !== undefined) query = query.where('owner_node_id', '=', ownerNodeId);
      if (after !== undefined) query = query.where('id', '>', after);
      if (leaseExpired) {
        // On the store's clock, like every lease comparison (store-clock.ts).
        const now = this.#clockSql.nowFor(this.#now());
        query = query.where((eb) =>
          eb.or([eb('lease_expires_at', 'is', null), eb('lease_expires_at', '<=', now)]),
        );
      }
      const rows = await query.execute();
      const page = rows.slice(0, limit);
      const last = page[page.length - 1];
      return {
        records: page.map(rowToRecord),
        next: rows.length > limit && last ? encodeCursor(last.id) : null,
      };
    });
  }

  async purge(ageMs: number): Promise<number> {
    return this.#run('purge', async () => {
      const age = validAgeMs(ageMs, 'ageMs');
      // Aged on the store's clock, which wrote `updated_at` (store-clock.ts): a node whose wall clock is ahead by
      // more than the retention would otherwise purge records finished a moment ago, and a resend run them again.
      const now = this.#clockSql.nowFor(this.#now());
      const result = await this.#db
        .deleteFrom('transfers')
        .where('state', 'in', TERMINAL_STATES as TransferState[])
        .where('updated_at', '<', sql<number>`${now} - ${age}`)
        .executeTakeFirst();
      return Number(result.numDeletedRows);
    });
  }

  async registerNode(node: NodeRegistration): Promise<void> {
    return this.#run('registerNode', () => this.#nodes.register(node, this.#now()));
  }

  async touchNode(nodeId: string): Promise<void> {
    return this.#run('touchNode', () => this.#nodes.touch(nodeId, this.#now()));
  }

  async listNodes(): Promise<NodeInfo[]> {
    return this.#run('listNodes', () => this.#nodes.list(this.#now()));
  }

  /**
   * Answers when the store can serve: the database is reachable and its tables are there (a schema dropped or
   * replaced by an empty database is `STORE_UNAVAILABLE` with `details.reason: "schema-missing"`).
   */
  async ping(): Promise<void> {
    return this.#run('ping', () => checkSchema(this.#reader as Kysely<unknown>));
  }

  /**
   * Stops accepting operations (they throw `STORE_UNAVAILABLE`), lets the ones already running finish (for
   * at most `CLOSE_DRAIN_MS`), then closes the connections. Idempotent.
   */
  async close(): Promise<void> {
    await this.#guard.close(() =>
      (this.#reader === this.#db
        ? Promise.resolve()
        : this.#reader.destroy().catch((err: unknown) => {
            this.#logger.warn({ err: (err as Error).message }, 'store: closing the read connection failed');
          })
      )
        .then(() => this.#db.destroy())
        .catch((err: unknown) => {
          this.#logger.warn({ err: (err as Error).message }, 'store: closing the database failed');
        })
        // Only once the database is closed: the next holder must not find this process still writing.
        .finally(() => this.#releaseLock?.()),
    );
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #now(): number {
    return this.#clock.now().getTime();
  }

  #run<T>(operation: string, run: () => Promise<T>): Promise<T> {
    return this.#guard.run(operation, run);
  }

  #exec<R>(query: CompiledQuery<R>): Promise<Row<R>> {
    return this.#db.executeQuery(query) as Promise<Row<R>>;
  }

  async #one<R>(query: CompiledQuery<R>): Promise<R | undefined> {
    const { rows } = await this.#exec(query);
    return rows[0];
  }

  /** Explains why a fenced write on `id` changed nothing. */
  async #whyRefused(
    id: string,
    epoch: number,
    operation: string,
    leaseCondition: LeaseCondition = LeaseCondition.none,
  ): Promise<Error> {
    const current = await this.#one(this.#q.stateById.bind({ id }));
    return refusalOf(id, epoch, operation, current, leaseCondition);
  }
}

/** What an owner change's statement required of the lease (queries.ts `ownerChange`). */
function ownerChangeCondition(options: OwnerChangeOptions): LeaseCondition {
  return options.requireExpiredLease === true ? LeaseCondition.expired : LeaseCondition.expiredIfFinishing;
}
