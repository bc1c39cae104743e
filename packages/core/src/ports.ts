/**
 * Port interfaces: what the apps and the pipeline need from the store, the backplane and the clock.
 * `@sluice/store` and `@sluice/backplane` implement them; the pipeline sees only these.
 */
import type { SluiceEvent, SluiceEventType } from './events.js';
import type {
  TransferFailure,
  TransferRecord,
  TransferRequest,
  TransferResult,
  TransferState,
} from './transfer.js';

/** Time source; injected so leases and timeouts can be tested. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A node's identity as an owner: its id, its advertised address, and its process incarnation. */
export interface OwnerIdentity {
  nodeId: string;
  address: string;
  /** Unique per process start, so a restarted node does not heartbeat the transfers of its previous life. */
  instanceId: string;
}

/** What one {@link DataPlaneStore.heartbeat} did to the leases of its owner's transfers (ids sorted). */
export interface HeartbeatOutcome {
  /** Transfers whose lease it extended: the owner still owns them. */
  extended: string[];
  /** Transfers the owner owned as the statement began whose rows another session held locked: not extended. */
  held: string[];
}

export interface SubmitInput {
  request: TransferRequest;
  requestHash: string;
  owner: OwnerIdentity;
  leaseMs: number;
  /**
   * The state a new record is created in. `IN_PROGRESS` when the submitting owner starts the work at once: the
   * insert is then the only commit before the reply (no separate RECEIVED → IN_PROGRESS write). Default `RECEIVED`.
   */
  state?: 'RECEIVED' | 'IN_PROGRESS';
}

export interface SubmitOutcome {
  record: TransferRecord;
  /** True when this call inserted the record (and so owns it at epoch 1, in the state `SubmitInput.state` named). */
  created: boolean;
}

export interface TransitionInput {
  /** The state to move to; must be legal from the current one. */
  to: TransferState;
  error?: TransferFailure;
  result?: TransferResult;
}

/** Conditions of an owner change. */
export interface OwnerChangeOptions {
  /**
   * Change the owner only if the current lease has expired *by the store's clock* (PostgreSQL `now()`, never a
   * node's wall clock); otherwise the store throws `LEASE_HELD` and nothing changes. Used when the backplane
   * could not tell whether the owner is alive. Without it (a definite "nobody"), a record whose owner passed its
   * {@link DataPlaneStore.finishing} step at the current epoch still needs an expired lease (`LEASE_HELD`,
   * `details.finishing: true`), unless the caller is that owner's own instance.
   */
  requireExpiredLease?: boolean;
}

export interface ListTransfersInput {
  state?: TransferState;
  ownerNodeId?: string;
  /**
   * Only records whose lease has expired by the store's clock (the sweeper's candidates; ownership still
   * changes only through a conditional `takeOver`).
   */
  leaseExpired?: boolean;
  /** Opaque cursor from a previous page's `next`. */
  cursor?: string;
  limit?: number;
}

export interface TransferPage {
  records: TransferRecord[];
  next: string | null;
}

export interface NodeInfo {
  nodeId: string;
  address: string;
  instanceId: string;
  startedAt: Date;
  lastSeenAt: Date;
  /**
   * How long ago `lastSeenAt` was when listed, by the store's clock (PostgreSQL's, not the asking node's), so
   * "alive" is judged by one clock whatever the nodes' wall clocks say.
   */
  silentMs: number;
}

/**
 * The durable data-plane store. Every operation is atomic; every owner write is conditional on the caller's
 * epoch (fencing) and throws `STALE_EPOCH` when another node took the transfer over.
 */
export interface DataPlaneStore extends AsyncDisposable {
  /**
   * Inserts the request if its id is absent, owned by `owner` at epoch 1 in state `RECEIVED` with a lease.
   * Same id with another request (`matchesStoredRequest` of the stored record and `requestHash` is false) →
   * `IDEMPOTENCY_CONFLICT`, nothing changes. Of N concurrent submits exactly one
   * gets `created: true`.
   */
  submit(input: SubmitInput): Promise<SubmitOutcome>;
  /**
   * Takes a non-terminal transfer over: compare-and-set on `expectedEpoch`; sets the owner, increments the
   * epoch and attempts, renews the lease. Exactly one of N concurrent callers wins; the others get `STALE_EPOCH`.
   * `LEASE_HELD` when the lease is fresh and either `requireExpiredLease` or the owner is finishing
   * ({@link OwnerChangeOptions}).
   */
  takeOver(
    id: string,
    expectedEpoch: number,
    owner: OwnerIdentity,
    leaseMs: number,
    options?: OwnerChangeOptions,
  ): Promise<TransferRecord>;
  /**
   * Terminates a transfer whose owner is gone, in **one statement**: compare-and-set on `expectedEpoch`, the
   * caller becomes the owner (epoch + 1) and the state `TERMINATED` at once — so no crash or store error can
   * leave the caller owning a live transfer. `STALE_EPOCH` when the epoch moved, `ILLEGAL_TRANSITION` when the
   * record is already terminal, `LEASE_HELD` when the lease is still fresh and either `requireExpiredLease` or
   * the owner is finishing ({@link OwnerChangeOptions}).
   */
  terminateAbandoned(
    id: string,
    expectedEpoch: number,
    owner: OwnerIdentity,
    options?: OwnerChangeOptions,
  ): Promise<TransferRecord>;
  /** Moves the transfer along the state machine, fenced by `epoch`. */
  transition(id: string, epoch: number, input: TransitionInput): Promise<TransferRecord>;
  /**
   * Writes the pipeline checkpoint into the record, fenced by `epoch` (and renews the lease). A checkpoint that
   * differs from the stored one is progress: it sets `retries` back to 0.
   */
  saveCheckpoint(id: string, epoch: number, checkpoint: unknown, leaseMs?: number): Promise<void>;
  /**
   * The fenced finishing step of the owner at `epoch`, right before a sink publishes what cannot be taken back:
   * confirms the epoch (`STALE_EPOCH` once another owner took over, `ILLEGAL_TRANSITION` when final), renews the
   * lease (when `leaseMs` is given) and marks the record as finishing at this epoch. From then until the record
   * is final or its lease expired by the store's clock, no owner change lands on a "nobody" from the backplane
   * (`LEASE_HELD`, {@link OwnerChangeOptions}): the owner either records its outcome or is stopped by its own
   * lease watchdog before it publishes.
   *
   * @example
   * ```ts
   * await store.finishing('orders-1', 3, 30_000);
   * await rename(temp, destination); // no terminate or takeover on a "nobody" lands before COMPLETED
   * await store.transition('orders-1', 3, { to: 'COMPLETED', result });
   * ```
   */
  finishing(id: string, epoch: number, leaseMs?: number): Promise<void>;
  /**
   * Counts a retryable failure of the run at `epoch` (`retries` + 1), fenced like every owner write; returns the
   * record as it now stands. `STALE_EPOCH` once another owner took over, `ILLEGAL_TRANSITION` when it is final.
   *
   * @example
   * ```ts
   * const { retries } = await store.recordRetry('orders-1', 3);
   * if (retries > 20) await store.transition('orders-1', 3, { to: 'FAILED', error });
   * ```
   */
  recordRetry(id: string, epoch: number): Promise<TransferRecord>;
  /**
   * Extends the leases of every non-terminal transfer owned by this owner instance, in one statement that waits
   * for no row: a row another session holds locked (a takeover or terminate in flight, an operator's open
   * transaction) is skipped and named in `held` — neither extended nor lost, judged by a later heartbeat — so one
   * held row cannot cost the owner the leases of all its other transfers. The caller stops work on anything it
   * runs that is in neither list: it was fenced.
   *
   * @example
   * ```ts
   * const { extended, held } = await store.heartbeat(me, 30_000);
   * for (const run of runs) if (!extended.includes(run.id) && !held.includes(run.id)) run.stop('fenced');
   * ```
   */
  heartbeat(owner: OwnerIdentity, leaseMs: number): Promise<HeartbeatOutcome>;
  /** Expires the lease of a transfer this owner holds, so another node can take it at once (graceful handback). */
  release(id: string, epoch: number): Promise<void>;
  /**
   * Takes over up to `limit` transfers whose lease expired, oldest first, atomically: two sweepers never get
   * the same row. Returns the records now owned by `owner`.
   */
  recoverExpired(owner: OwnerIdentity, leaseMs: number, limit: number): Promise<TransferRecord[]>;
  get(id: string): Promise<TransferRecord | null>;
  list(input?: ListTransfersInput): Promise<TransferPage>;
  /**
   * Deletes terminal records last updated at least `ageMs` ago — on the store's clock, which wrote their
   * `updatedAt`, so a node whose wall clock is off purges exactly what any other would; returns how many.
   *
   * @example
   * ```ts
   * await store.purge(30 * 86_400_000); // finished more than 30 days ago
   * ```
   */
  purge(ageMs: number): Promise<number>;
  /** Registers (or re-registers) a node and its advertised address. */
  registerNode(
    node: Omit<NodeInfo, 'lastSeenAt' | 'startedAt' | 'silentMs'> & { startedAt?: Date },
  ): Promise<void>;
  /** Marks a node as seen now. */
  touchNode(nodeId: string): Promise<void>;
  listNodes(): Promise<NodeInfo[]>;
  /** Round trip to the database, for readiness probes. */
  ping(): Promise<void>;
}

/**
 * Where a pipeline keeps a transfer's progress checkpoint (the store record, fenced by the epoch), and the
 * fencing token its sinks carry to where their effects land (docs/fencing.md).
 */
export interface CheckpointPort {
  load(): Promise<unknown | null>;
  /** Saves the checkpoint, fenced by {@link CheckpointPort.epoch}; throws `STALE_EPOCH` once fenced off. */
  save(checkpoint: unknown): Promise<void>;
  /**
   * The run's fencing epoch (the store record's epoch when this owner claimed it; increments on every owner
   * change). Sinks check it where their effects land: the PostgreSQL sink's fence row, the file sink's temp
   * names, the cache's write transaction. `0` for runs the store does not track (fire-and-forget): unfenced.
   */
  readonly epoch: number;
  /**
   * The fenced "finishing" step: confirms in the store that this epoch still owns the transfer, right before a
   * sink publishes what cannot be taken back (the file sink's rename), and keeps owner changes on a "nobody" off
   * the record until its lease expired ({@link DataPlaneStore.finishing}). Throws `STALE_EPOCH` when fenced off.
   */
  finishing(): Promise<void>;
  /**
   * Whether this run may still put an effect in a destination right now — false once its owner was told to stop,
   * or once its lease ran out by the owner's monotonic clock (a process frozen or cut off from the store may not
   * know yet that another owner took over, but it knows it may no longer write). Synchronous and cheap: a sink
   * whose destination cannot fence a writer (JetStream dedupes a stale owner's replay only inside the stream's
   * `duplicate_window`) asks before each effect. Absent: the run is not fenced this way (fire-and-forget, tools).
   *
   * @example
   * ```ts
   * if (fence.mayWrite?.() === false) throw new StaleEpochError(transferId, fence.epoch);
   * ```
   */
  mayWrite?(): boolean;
}

/** What the owner of a transfer reports about it. */
export interface OwnerReport {
  nodeId: string;
  address: string;
  epoch: number;
  /** Free-form progress (records read/written, phase). */
  progress?: Record<string, unknown>;
}

/** The three honest answers to "who runs transfer X?". */
/**
 * An answer the backplane could not make certain. `silent` marks the one case that is not an outage: the
 * backplane is connected and the question reached the owner's subscription, but no owner answered within the
 * wait (a hung or frozen process). The idempotence protocol (docs/architecture.md § Protocol 1) reads that as
 * "nobody answers within the configured wait", which allows a takeover (fenced by the epoch, so a hung owner that wakes up cannot write); any other `unknown` must
 * fall back to the lease.
 */
export interface UnknownAnswer {
  status: 'unknown';
  reason: string;
  silent?: boolean;
}

export type OwnerAnswer =
  | { status: 'owner'; owner: OwnerReport }
  | { status: 'nobody' }
  /** The backplane could not tell; never to be read as "nobody" (see {@link UnknownAnswer}). */
  | UnknownAnswer;

export type TerminateAnswer =
  | { status: 'terminated'; by: string }
  | { status: 'not-running' }
  | UnknownAnswer;

/** What a node that runs a transfer answers for it on the backplane. */
export interface TransferResponder {
  /** Called for every owner query; must be cheap. */
  report(): OwnerReport;
  /** Stop the work; resolve once it has stopped. */
  terminate(): Promise<void>;
}

export interface WhoRunsOptions {
  /** How long to wait for an owner that is alive but slow. */
  timeoutMs: number;
  /** The owner's advertised address from the store (the direct-address strategy asks it). */
  ownerAddress?: string | null;
  /**
   * The owner's process instance from the store: a NATS backplane in instance mode asks that instance's subject
   * (without one its answer is `unknown`, never `nobody`).
   */
  ownerInstance?: string | null;
}

export type BackplaneStatus = 'connected' | 'reconnecting' | 'disconnected' | 'closed';

/** An active registration or subscription; dispose to end it. */
export interface Registration extends AsyncDisposable {
  close(): Promise<void>;
}

export interface EventPublisher {
  publish(event: SluiceEvent): Promise<void>;
}

export interface SubscribeOptions {
  /** Only these event types (default: all). */
  types?: SluiceEventType[];
}

export interface EventSubscriber {
  /** Calls `handler` for each valid event; malformed messages are logged and dropped. */
  subscribe(
    handler: (event: SluiceEvent) => void | Promise<void>,
    options?: SubscribeOptions,
  ): Promise<Registration>;
  /** The latest `AliasRedirected` per alias, for processes that (re)connect late. Empty when not kept. */
  latestAliasEvents(): Promise<SluiceEvent[]>;
}

/**
 * How nodes find the owner of a transfer, route terminations to it, and fan out events.
 */
export interface Backplane extends EventPublisher, EventSubscriber, AsyncDisposable {
  /** Answer for `transferId` while this node runs it. Must be answering before the record says IN_PROGRESS. */
  serve(transferId: string, responder: TransferResponder): Promise<Registration>;
  whoRuns(transferId: string, options: WhoRunsOptions): Promise<OwnerAnswer>;
  terminate(transferId: string, options: WhoRunsOptions): Promise<TerminateAnswer>;
  status(): BackplaneStatus;
  /** Called on every status change (for readiness and metrics; and to reconcile after a reconnect). */
  onStatus(listener: (status: BackplaneStatus) => void): () => void;
  /**
   * Whether this node's responders have been reachable by its peers without interruption from `since` (a
   * `performance.now()` instant of this process) until now — so no peer can have been told "nobody" for a
   * transfer this node served all that time. NATS: connected now, with no drop, reconnect or stale connection
   * since (the server forgets a connection's subscriptions with it). Direct and single-node: until `close()`.
   * Cheap (no I/O): an owner asks it before skipping a store round trip on the strength of its responder.
   *
   * @example
   * ```ts
   * const servedAt = performance.now();
   * await using registration = await backplane.serve(id, responder);
   * // … later: nobody can have heard "nobody" for `id` while this holds
   * if (backplane.reachableSince(servedAt)) skipTheStoreCheck();
   * ```
   */
  reachableSince(since: number): boolean;
  close(): Promise<void>;
}

/** Minimal structured logger (pino-compatible). */
export interface Logger {
  debug(obj: object | string, msg?: string): void;
  info(obj: object | string, msg?: string): void;
  warn(obj: object | string, msg?: string): void;
  error(obj: object | string, msg?: string): void;
}

/** A logger that drops everything. */
export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };
