import {
  type Clock,
  type DataPlaneStore,
  IdempotencyConflictError,
  IllegalTransitionError,
  InternalError,
  isTerminal,
  LeaseHeldError,
  type ListTransfersInput,
  type Logger,
  NameSchema,
  type NodeInfo,
  NotFoundError,
  type OwnerChangeOptions,
  type OwnerIdentity,
  parseOrThrow,
  StaleEpochError,
  type SubmitInput,
  type SubmitOutcome,
  TERMINAL_STATES,
  TransferNotFoundError,
  type TransferPage,
  type TransferRecord,
  type TransferState,
  type TransitionInput,
  ValidationError,
} from '@sluice/core';
import { type CompiledQuery, type Kysely, sql } from 'kysely';
import type { StoreDialect } from './dialect.js';
import { closedStoreError, TransferFinalError, toStoreError } from './errors.js';
import { type InsertNames, prepareQueries, type Queries } from './queries.js';
import { rowToNode, rowToRecord } from './record.js';
import type { StoreDatabase } from './schema.js';
import { storeClock } from './store-clock.js';
import {
  boundedJson,
  encodeCursor,
  STORE_LIMITS,
  validDate,
  validEpoch,
  validFailure,
  validHash,
  validId,
  validLeaseMs,
  validLimit,
  validListInput,
  validOwner,
  validRequest,
  validResult,
  validState,
  validSubmitState,
} from './validate.js';

type SubmitValues = Record<InsertNames, string | number>;
type Row<T> = { rows: T[]; numAffectedRows?: bigint };

/** How long `close()` waits for running operations before closing the connections under them. */
const CLOSE_DRAIN_MS = 10_000;
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
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #q: Queries;
  readonly #clockSql: ReturnType<typeof storeClock>;
  #closing: Promise<void> | null = null;
  /** Operations accepted before `close()`, which it lets finish before closing the connections. */
  readonly #inFlight = new Set<Promise<unknown>>();

  /** @internal Use `openStore()`: it validates the URL and runs the migrations. */
  constructor(
    db: Kysely<StoreDatabase>,
    dialect: StoreDialect,
    clock: Clock,
    logger: Logger,
    statements?: { register(sql: string): void },
  ) {
    this.#db = db;
    this.dialect = dialect;
    this.#clock = clock;
    this.#logger = logger;
    this.#q = prepareQueries(db, dialect);
    this.#clockSql = storeClock(dialect);
    if (statements) {
      const { transitions, ...rest } = this.#q;
      for (const query of [...Object.values(rest), ...transitions.values()]) statements.register(query.sql);
    }
  }

  /** True once `close()` was called. */
  get closed(): boolean {
    return this.#closing !== null;
  }

  async submit(input: SubmitInput): Promise<SubmitOutcome> {
    return this.#guard('submit', async () => {
      if (typeof input !== 'object' || input === null) {
        throw new ValidationError('Invalid submit input: expected an object', [
          { path: '(root)', message: 'expected an object' },
        ]);
      }
      const { request, json } = validRequest(input.request);
      const requestHash = validHash(input.requestHash);
      const owner = validOwner(input.owner);
      const leaseMs = validLeaseMs(input.leaseMs);
      const state = validSubmitState(input.state);
      const now = this.#now();
      const values: SubmitValues = {
        id: request.id,
        hash: requestHash,
        request: json,
        state,
        nodeId: owner.nodeId,
        address: owner.address,
        instance: owner.instanceId,
        leaseMs,
        now,
      };
      const fresh: TransferRecord = {
        id: request.id,
        requestHash,
        request,
        state,
        ownerNodeId: owner.nodeId,
        ownerAddress: owner.address,
        ownerInstance: owner.instanceId,
        epoch: 1,
        // This node's estimate; the row holds the store's own (PostgreSQL computes it with its clock).
        leaseExpiresAt: new Date(now + leaseMs),
        attempts: 1,
        error: null,
        result: null,
        checkpoint: null,
        createdAt: new Date(now),
        updatedAt: new Date(now),
      };
      for (let attempt = 1; ; attempt++) {
        const outcome =
          this.dialect === 'postgres'
            ? await this.#submitPostgres(values)
            : await this.#submitSqlite(values, fresh);
        if (outcome) {
          if (!outcome.created && outcome.record.requestHash !== requestHash) {
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
    const row = await this.#one(this.#q.submitPg.bind(values));
    if (row) {
      const { created, ...record } = row;
      // The row, not `fresh`: its lease was computed by PostgreSQL's clock (store-clock.ts).
      return { record: rowToRecord(record), created: Number(created) === 1 };
    }
    // Another node inserted the id after this statement's snapshot was taken: read it now.
    const winner = await this.#one(this.#q.getById.bind({ id: values.id }));
    return winner ? { record: rowToRecord(winner), created: false } : null;
  }

  async takeOver(
    id: string,
    expectedEpoch: number,
    owner: OwnerIdentity,
    leaseMs: number,
    options: OwnerChangeOptions = {},
  ): Promise<TransferRecord> {
    return this.#guard('takeOver', async () => {
      const values = this.#ownerChange(id, expectedEpoch, owner, leaseMs);
      const query = options.requireExpiredLease === true ? this.#q.takeOverExpired : this.#q.takeOver;
      const row = await this.#one(query.bind(values));
      if (row) return rowToRecord(row);
      throw await this.#whyRefused(
        values.id,
        values.epoch,
        'a takeover',
        options.requireExpiredLease === true,
      );
    });
  }

  async terminateAbandoned(
    id: string,
    expectedEpoch: number,
    owner: OwnerIdentity,
    options: OwnerChangeOptions = {},
  ): Promise<TransferRecord> {
    return this.#guard('terminateAbandoned', async () => {
      const values = this.#ownerChange(id, expectedEpoch, owner, 1_000);
      const query =
        options.requireExpiredLease === true ? this.#q.terminateAbandonedExpired : this.#q.terminateAbandoned;
      const row = await this.#one(query.bind(values));
      if (row) return rowToRecord(row);
      const refusal = await this.#whyRefused(
        values.id,
        values.epoch,
        'a termination',
        options.requireExpiredLease === true,
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
    return this.#guard('transition', async () => {
      const validated = { id: validId(id), epoch: validEpoch(epoch) };
      if (typeof input !== 'object' || input === null) {
        throw new ValidationError('Invalid transition: expected an object', [
          { path: '(root)', message: 'expected an object' },
        ]);
      }
      const to = validState(input.to, 'target state');
      const error = input.error === undefined || input.error === null ? null : validFailure(input.error);
      const result = input.result === undefined || input.result === null ? null : validResult(input.result);
      const query = this.#q.transitions.get(to);
      if (query) {
        const row = await this.#one(
          query.bind({
            ...validated,
            error: error === null ? null : JSON.stringify(error),
            result: result === null ? null : JSON.stringify(result),
            now: this.#now(),
          }),
        );
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
    return this.#guard('saveCheckpoint', async () => {
      const validated = {
        id: validId(id),
        epoch: validEpoch(epoch),
        checkpoint: boundedJson(checkpoint, 'checkpoint', STORE_LIMITS.maxCheckpointBytes),
        now: this.#now(),
      };
      const query =
        leaseMs === undefined
          ? this.#q.saveCheckpoint.bind(validated)
          : this.#q.saveCheckpointAndLease.bind({ ...validated, leaseMs: validLeaseMs(leaseMs) });
      const { numAffectedRows } = await this.#exec(query);
      if (numAffectedRows === 1n) return;
      throw await this.#whyRefused(validated.id, validated.epoch, 'a checkpoint');
    });
  }

  async heartbeat(owner: OwnerIdentity, leaseMs: number): Promise<string[]> {
    return this.#guard('heartbeat', async () => {
      const o = validOwner(owner);
      const { rows } = await this.#exec(
        this.#q.heartbeat.bind({
          nodeId: o.nodeId,
          instance: o.instanceId,
          leaseMs: validLeaseMs(leaseMs),
          now: this.#now(),
        }),
      );
      return rows.map((row) => row.id).sort();
    });
  }

  async release(id: string, epoch: number): Promise<void> {
    return this.#guard('release', async () => {
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
    return this.#guard('recoverExpired', async () => {
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
    return this.#guard('get', async () => {
      const row = await this.#one(this.#q.getById.bind({ id: validId(id) }));
      return row ? rowToRecord(row) : null;
    });
  }

  async list(input?: ListTransfersInput): Promise<TransferPage> {
    return this.#guard('list', async () => {
      const { state, ownerNodeId, after, limit, leaseExpired } = validListInput(input);
      let query = this.#db
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

  async purge(olderThan: Date): Promise<number> {
    return this.#guard('purge', async () => {
      const before = validDate(olderThan, 'olderThan').getTime();
      const result = await this.#db
        .deleteFrom('transfers')
        .where('state', 'in', TERMINAL_STATES as TransferState[])
        .where('updated_at', '<', before)
        .executeTakeFirst();
      return Number(result.numDeletedRows);
    });
  }

  async registerNode(
    node: Omit<NodeInfo, 'lastSeenAt' | 'startedAt' | 'silentMs'> & { startedAt?: Date },
  ): Promise<void> {
    return this.#guard('registerNode', async () => {
      if (typeof node !== 'object' || node === null) {
        throw new ValidationError('Invalid node: expected an object', [
          { path: '(root)', message: 'expected an object' },
        ]);
      }
      const identity = validOwner(node, 'node');
      const now = this.#now();
      const startedAt =
        node.startedAt === undefined ? now : validDate(node.startedAt, 'node.startedAt').getTime();
      const row = {
        node_id: identity.nodeId,
        address: identity.address,
        instance_id: identity.instanceId,
        started_at: node.startedAt === undefined ? this.#clockSql.nowFor(now) : startedAt,
        last_seen_at: this.#clockSql.nowFor(now),
      };
      await this.#db
        .insertInto('nodes')
        .values(row)
        .onConflict((oc) =>
          oc.column('node_id').doUpdateSet({
            address: row.address,
            instance_id: row.instance_id,
            started_at: row.started_at,
            last_seen_at: row.last_seen_at,
          }),
        )
        .execute();
    });
  }

  async touchNode(nodeId: string): Promise<void> {
    return this.#guard('touchNode', async () => {
      const id = parseOrThrow(NameSchema, nodeId, 'Invalid node id');
      const result = await this.#db
        .updateTable('nodes')
        .set({ last_seen_at: this.#clockSql.nowFor(this.#now()) })
        .where('node_id', '=', id)
        .executeTakeFirst();
      if (result.numUpdatedRows === 0n) throw new NotFoundError(`Node "${id}" is not registered`);
    });
  }

  async listNodes(): Promise<NodeInfo[]> {
    return this.#guard('listNodes', async () => {
      const rows = await this.#db
        .selectFrom('nodes')
        .selectAll()
        .select(this.#clockSql.nowFor(this.#now()).as('store_now'))
        .orderBy('node_id')
        .execute();
      return rows.map((row) => rowToNode(row, Number(row.store_now)));
    });
  }

  async ping(): Promise<void> {
    return this.#guard('ping', async () => {
      await sql`select 1`.execute(this.#db);
    });
  }

  /**
   * Stops accepting operations (they throw `STORE_UNAVAILABLE`), lets the ones already running finish (for
   * at most `CLOSE_DRAIN_MS`), then closes the connections. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closing === null) this.#closing = this.#drainAndDestroy();
    await this.#closing;
  }

  async #drainAndDestroy(): Promise<void> {
    if (this.#inFlight.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, CLOSE_DRAIN_MS);
        timer.unref();
      });
      await Promise.race([Promise.allSettled([...this.#inFlight]), deadline]);
      clearTimeout(timer);
    }
    await this.#db.destroy().catch((err: unknown) => {
      this.#logger.warn({ err: (err as Error).message }, 'store: closing the database failed');
    });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #now(): number {
    return this.#clock.now().getTime();
  }

  async #guard<T>(operation: string, run: () => Promise<T>): Promise<T> {
    if (this.#closing !== null) throw closedStoreError();
    const running = run();
    this.#inFlight.add(running);
    try {
      return await running;
    } catch (err) {
      const mapped = toStoreError(err, operation);
      if (mapped.code === 'INTERNAL')
        this.#logger.error({ err: mapped.message, operation }, 'store: unexpected failure');
      throw mapped;
    } finally {
      this.#inFlight.delete(running);
    }
  }

  #exec<R>(query: CompiledQuery<R>): Promise<Row<R>> {
    return this.#db.executeQuery(query) as Promise<Row<R>>;
  }

  async #one<R>(query: CompiledQuery<R>): Promise<R | undefined> {
    const { rows } = await this.#exec(query);
    return rows[0];
  }

  /** Explains why a fenced write on `id` changed nothing. */
  async #whyRefused(id: string, epoch: number, operation: string, leaseCondition = false): Promise<Error> {
    const current = await this.#one(this.#q.stateById.bind({ id }));
    if (!current) return new TransferNotFoundError(id);
    if (Number(current.epoch) !== epoch) {
      return new StaleEpochError(id, epoch, { details: { epoch: Number(current.epoch) } });
    }
    if (isTerminal(current.state)) return new TransferFinalError(id, current.state, operation);
    // Same epoch, active state: the statement's lease condition refused it (the owner's lease is fresh).
    if (leaseCondition) return new LeaseHeldError(id);
    // Same epoch, active state, yet nothing changed: the record moved between the two statements.
    return new StaleEpochError(id, epoch);
  }
}
