import {
  asSluiceError,
  type Backplane,
  BackplaneUnavailableError,
  type CheckpointPort,
  type Clock,
  type DataPlaneStore,
  ErrorCode,
  IdempotencyConflictError,
  IllegalTransitionError,
  isTerminal,
  type Logger,
  type OwnerAnswer,
  type OwnerIdentity,
  type PipelineProgress,
  QueueFullError,
  type Registration,
  requestHash,
  SluiceError,
  StaleEpochError,
  TransferNotFoundError,
  type TransferRecord,
  type TransferRequest,
  type TransferResult,
  type TransferState,
} from '@sluice/core';
import type { NodeMetrics } from '../metrics.js';
import type { RequestPolicy } from './confinement.js';
import { Scheduler, type Ticket } from './scheduler.js';
import { type OwnerView, type TransferView, transferView } from './view.js';

/** Runs one transfer to completion (the app wires `runTransfer` of `@sluice/pipeline` here). */
export type TransferExecutor = (
  request: TransferRequest,
  context: {
    checkpoint: CheckpointPort;
    signal: AbortSignal;
    onProgress: (progress: PipelineProgress) => void;
  },
) => Promise<TransferResult>;

/** Timings and bounds of the protocol (all from `limits` in the configuration). */
export interface CoordinatorLimits {
  leaseMs: number;
  heartbeatMs: number;
  ownerWaitMs: number;
  sweepIntervalMs: number;
  maxConcurrentTransfers: number;
  queueSize: number;
  fireAndForgetConcurrency: number;
  shutdownGraceMs: number;
}

export interface CoordinatorOptions {
  store: DataPlaneStore;
  backplane: Backplane;
  identity: OwnerIdentity;
  limits: CoordinatorLimits;
  policy: RequestPolicy;
  execute: TransferExecutor;
  /** Removes what a transfer's runs staged outside its destination once it is FAILED or TERMINATED. */
  discard?: (request: TransferRequest) => Promise<void>;
  metrics: NodeMetrics;
  logger: Logger;
  clock: Clock;
}

/** The HTTP outcome of a submission. */
export type SubmitReply =
  | { status: 201 | 200; body: TransferView }
  | { status: 202; body: TransferView & { resumed: boolean } }
  | {
      status: 202;
      body: { id: string; mode: 'fire-and-forget'; accepted: true; owner: OwnerView };
    };

/** Why a local run stops before it finishes by itself. */
type StopReason = 'terminate' | 'fenced' | 'handback' | 'lease-lost';

/** A transfer this node claimed (or is claiming) and runs or queues. */
interface LocalRun {
  id: string;
  hash: string;
  /** 0 while the claim is not confirmed by the store. */
  epoch: number;
  /** When the claim was confirmed (for the heartbeat's fencing decision). */
  claimedAt: number;
  /** Monotonic time (performance.now) past which the store may have given the transfer to another node. */
  leaseDeadline: number;
  controller: AbortController;
  stopReason: StopReason | null;
  started: boolean;
  finishing: boolean;
  settled: boolean;
  progress: PipelineProgress | null;
  /** The request, once the run started executing (what `discard` needs). */
  request: TransferRequest | null;
  registration: Registration | null;
  done: Promise<void>;
  markDone: () => void;
}

const STORE_RETRIES = 5;
const WATCHDOG_MS = 20;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * The idempotence protocol of DESIGN.md § Transfers on top of the store and backplane ports: submit /
 * conflict / stored outcome / owner lookup / fenced takeover and resume, lease heartbeats that stop work the
 * store no longer lets this node own, a sweeper for expired leases, terminate routed to the owner, graceful
 * handback, and bounded concurrency with a queue.
 *
 * @example
 * ```ts
 * const coordinator = new TransferCoordinator({ store, backplane, identity, limits, policy, execute, metrics, logger, clock });
 * coordinator.start();
 * const reply = await coordinator.submit(parseTransferRequest(body));
 * await coordinator.shutdown();
 * ```
 */
export class TransferCoordinator {
  readonly #o: CoordinatorOptions;
  readonly #scheduler: Scheduler;
  readonly #fireAndForget: Scheduler;
  readonly #runs = new Map<string, LocalRun>();
  readonly #claiming = new Map<string, Promise<unknown>>();
  readonly #fireAndForgetControllers = new Set<AbortController>();
  #heartbeatTimer: NodeJS.Timeout | null = null;
  #watchdogTimer: NodeJS.Timeout | null = null;
  #sweepTimer: NodeJS.Timeout | null = null;
  #heartbeating = false;
  #sweeping = false;
  #closing = false;

  constructor(options: CoordinatorOptions) {
    this.#o = options;
    this.#scheduler = new Scheduler({
      concurrency: options.limits.maxConcurrentTransfers,
      queueSize: options.limits.queueSize,
    });
    this.#fireAndForget = new Scheduler({
      concurrency: options.limits.fireAndForgetConcurrency,
      queueSize: options.limits.queueSize,
    });
  }

  /** Counts for metrics. */
  stats(): { running: number; queued: number; fireAndForget: number } {
    return {
      running: this.#scheduler.running,
      queued: this.#scheduler.queued,
      fireAndForget: this.#fireAndForget.running + this.#fireAndForget.queued,
    };
  }

  /** Starts heartbeats and the sweeper, and adopts the transfers a previous life of this node left behind. */
  start(): void {
    this.#heartbeatTimer = setInterval(() => void this.heartbeat(), this.#o.limits.heartbeatMs);
    this.#sweepTimer = setInterval(() => void this.sweep(), this.#o.limits.sweepIntervalMs);
    // Frequent and cheap, so that after a freeze it fires before the pipeline's own timers write anything.
    this.#watchdogTimer = setInterval(() => this.#watchLeases(), WATCHDOG_MS);
    void this.#adoptPreviousLife();
  }

  /** Submits a parsed transfer request (paths not yet confined) and returns the HTTP reply. */
  async submit(request: TransferRequest): Promise<SubmitReply> {
    if (this.#closing) throw new SluiceError(ErrorCode.STORE_UNAVAILABLE, 'This node is shutting down', 503);
    // Confinement and connection checks first: bad input must never write anything.
    this.#o.policy.confine(request);
    if (request.mode === 'fire-and-forget') return this.#submitFireAndForget(request);
    const hash = requestHash(request);
    for (let attempt = 0; attempt < 8; attempt++) {
      const reply = await this.#submitOnce(request, hash);
      if (reply) return reply;
    }
    const record = await this.#o.store.get(request.id);
    if (!record) throw new SluiceError(ErrorCode.INTERNAL, `Transfer "${request.id}" vanished`, 500);
    return this.#reportOwner(record, record.ownerNodeId, record.ownerAddress, 'contended');
  }

  /** One pass of the protocol; null means "the world changed under us, look again". */
  async #submitOnce(request: TransferRequest, hash: string): Promise<SubmitReply | null> {
    const id = request.id;
    const pending = this.#claiming.get(id);
    if (pending) await pending.catch(() => {});
    const record = await this.#o.store.get(id);
    if (!record) return this.#claimNew(request, hash);
    if (record.requestHash !== hash) {
      this.#o.metrics.submits.inc({ outcome: 'conflict' });
      throw new IdempotencyConflictError(id);
    }
    if (isTerminal(record.state)) {
      this.#o.metrics.submits.inc({ outcome: 'terminal' });
      return { status: 200, body: transferView(record) };
    }
    const local = this.#runs.get(id);
    if (local && local.epoch === record.epoch && local.stopReason === null)
      return this.#reportOwner(record, this.#o.identity.nodeId, this.#o.identity.address, 'owner');
    const answer = await this.#whoRuns(record);
    if (answer.status === 'owner')
      return this.#reportOwner(record, answer.owner.nodeId, answer.owner.address, 'owner');
    // An owner that is silent (connected but not answering in time) is not taken over on resubmit while its
    // lease is fresh: under load a busy owner looks the same, and a resubmit must never cost a healthy run.
    // Its lease (the sweeper) decides; terminate, below, does take a silent owner's transfer over.
    if (answer.status === 'unknown' && !this.#leaseExpired(record)) {
      this.#o.logger.warn(
        { transferId: id, reason: answer.reason },
        'backplane cannot tell who runs the transfer; the lease is fresh, so it is not taken over',
      );
      return this.#reportOwner(record, record.ownerNodeId, record.ownerAddress, 'owner-unconfirmed');
    }
    return this.#takeOver(record, 'resubmit');
  }

  #reportOwner(
    record: TransferRecord,
    nodeId: string | null,
    address: string | null,
    outcome: string,
  ): SubmitReply {
    this.#o.metrics.submits.inc({ outcome });
    const body = transferView(record);
    if (nodeId !== null) body.owner = { nodeId, address };
    return { status: 202, body: { ...body, resumed: false } };
  }

  #leaseExpired(record: TransferRecord): boolean {
    return record.leaseExpiresAt === null || record.leaseExpiresAt.getTime() <= this.#o.clock.now().getTime();
  }

  /**
   * Asks the backplane, ignoring answers from responders older than the record's epoch (a stale owner that
   * came back, or a node still claiming): those never prove the current owner is alive.
   */
  async #whoRuns(record: TransferRecord): Promise<OwnerAnswer> {
    const deadline = Date.now() + this.#o.limits.ownerWaitMs;
    for (;;) {
      const answer = await this.#o.backplane.whoRuns(record.id, {
        timeoutMs: this.#o.limits.ownerWaitMs,
        ownerAddress: record.ownerAddress,
      });
      if (answer.status !== 'owner' || answer.owner.epoch >= record.epoch) return answer;
      if (Date.now() >= deadline)
        return { status: 'unknown', reason: `only a stale responder (epoch ${answer.owner.epoch}) answered` };
      await sleep(20);
    }
  }

  #reserve(): Ticket {
    const ticket = this.#scheduler.tryReserve();
    if (!ticket) {
      this.#o.metrics.submits.inc({ outcome: 'queue-full' });
      throw new QueueFullError(1);
    }
    return ticket;
  }

  #newRun(id: string, hash: string): LocalRun {
    let markDone: () => void = () => {};
    const done = new Promise<void>((resolve) => {
      markDone = resolve;
    });
    return {
      id,
      hash,
      epoch: 0,
      claimedAt: 0,
      leaseDeadline: Number.POSITIVE_INFINITY,
      controller: new AbortController(),
      stopReason: null,
      started: false,
      finishing: false,
      settled: false,
      progress: null,
      request: null,
      registration: null,
      done,
      markDone,
    };
  }

  /** Registers the responder first (the record must never say "owned" while nobody answers for it). */
  async #serve(run: LocalRun): Promise<void> {
    run.registration = await this.#o.backplane.serve(run.id, {
      report: () => ({
        nodeId: this.#o.identity.nodeId,
        address: this.#o.identity.address,
        epoch: run.epoch,
        progress: {
          state: run.started ? 'running' : 'queued',
          recordsRead: run.progress?.recordsRead ?? 0,
          recordsWritten: run.progress?.recordsWritten ?? 0,
        },
      }),
      terminate: async () => {
        this.#stop(run, 'terminate');
        await run.done;
      },
    });
  }

  async #abandon(run: LocalRun, ticket: Ticket): Promise<void> {
    this.#scheduler.cancel(ticket);
    await run.registration?.close().catch(() => {});
    run.settled = true;
    run.markDone();
  }

  async #claimNew(request: TransferRequest, hash: string): Promise<SubmitReply | null> {
    const id = request.id;
    // Checked synchronously: one claim per id per node at a time (the others wait for it and look again).
    if (this.#claiming.has(id)) return null;
    const ticket = this.#reserve();
    const run = this.#newRun(id, hash);
    const claim = (async (): Promise<SubmitReply | null> => {
      try {
        await this.#serve(run);
        const claimStartedAt = performance.now();
        const { record, created } = await this.#o.store.submit({
          request,
          requestHash: hash,
          owner: this.#o.identity,
          leaseMs: this.#o.limits.leaseMs,
        });
        if (!created) {
          await this.#abandon(run, ticket);
          return null;
        }
        run.epoch = record.epoch;
        this.#claimed(run, claimStartedAt);
        this.#replaceLocal(run);
        let current = record;
        try {
          current = await this.#o.store.transition(id, record.epoch, { to: 'IN_PROGRESS' });
        } catch (err) {
          this.#o.logger.warn({ transferId: id, err }, 'could not mark the new transfer IN_PROGRESS yet');
        }
        this.#schedule(run, ticket, current);
        this.#o.metrics.submits.inc({ outcome: 'created' });
        return { status: 201, body: transferView(current) };
      } catch (err) {
        if (this.#runs.get(id) !== run) await this.#abandon(run, ticket);
        throw err;
      }
    })();
    this.#claiming.set(id, claim);
    try {
      return await claim;
    } finally {
      if (this.#claiming.get(id) === claim) this.#claiming.delete(id);
    }
  }

  /** Takes over a transfer whose owner is gone (compare-and-set on the epoch) and resumes it here. */
  async #takeOver(record: TransferRecord, via: 'resubmit' | 'restart'): Promise<SubmitReply | null> {
    if (this.#claiming.has(record.id)) return null;
    const ticket = this.#reserve();
    const run = this.#newRun(record.id, record.requestHash);
    const claim = (async (): Promise<SubmitReply | null> => {
      try {
        await this.#retireLocal(record.id);
        await this.#serve(run);
        let taken: TransferRecord;
        const claimStartedAt = performance.now();
        try {
          taken = await this.#o.store.takeOver(
            record.id,
            record.epoch,
            this.#o.identity,
            this.#o.limits.leaseMs,
          );
        } catch (err) {
          if (SluiceError.hasCode(err, 'STALE_EPOCH') || SluiceError.hasCode(err, 'ILLEGAL_TRANSITION')) {
            await this.#abandon(run, ticket);
            return null;
          }
          throw err;
        }
        run.epoch = taken.epoch;
        this.#claimed(run, claimStartedAt);
        this.#replaceLocal(run);
        this.#o.metrics.takeovers.inc({ via });
        this.#o.logger.info(
          { transferId: record.id, epoch: taken.epoch, previousOwner: record.ownerNodeId, via },
          'took the transfer over',
        );
        this.#schedule(run, ticket, taken);
        this.#o.metrics.submits.inc({ outcome: 'resumed' });
        return { status: 202, body: { ...transferView(taken), resumed: true } };
      } catch (err) {
        if (this.#runs.get(record.id) !== run) await this.#abandon(run, ticket);
        throw err;
      }
    })();
    this.#claiming.set(record.id, claim);
    try {
      return await claim;
    } finally {
      if (this.#claiming.get(record.id) === claim) this.#claiming.delete(record.id);
    }
  }

  /** Stops and waits out an older local run of the same id (fenced), so its responder is gone. */
  async #retireLocal(id: string): Promise<void> {
    const previous = this.#runs.get(id);
    if (!previous) return;
    this.#stop(previous, 'fenced');
    await previous.done;
  }

  /** Installs `run` as the local run of its id. */
  #replaceLocal(run: LocalRun): void {
    this.#runs.set(run.id, run);
  }

  #schedule(run: LocalRun, ticket: Ticket, record: TransferRecord): void {
    this.#scheduler.start(ticket, () => this.#execute(run, record));
  }

  #stop(run: LocalRun, reason: StopReason): void {
    if (run.settled || run.stopReason !== null) return;
    run.stopReason = reason;
    run.controller.abort(new SluiceError(ErrorCode.TRANSFER_TERMINATED, `stopped: ${reason}`, 409));
    // A queued run has nothing to interrupt: settle it now rather than when a slot frees up.
    if (!run.started) void this.#settleStopped(run, null);
  }

  async #execute(run: LocalRun, record: TransferRecord): Promise<void> {
    if (run.settled || run.stopReason !== null) return;
    run.started = true;
    run.request = record.request;
    const { store, logger } = this.#o;
    const id = run.id;
    try {
      if (record.state === 'RECEIVED')
        await this.#retrying(() => store.transition(id, run.epoch, { to: 'IN_PROGRESS' }));
      const runnable = this.#o.policy.confine(record.request);
      let checkpoint: unknown | null = record.checkpoint;
      const port: CheckpointPort = {
        load: async () => checkpoint,
        save: async (next) => {
          if (run.stopReason === 'fenced' || run.stopReason === 'lease-lost')
            throw new StaleEpochError(id, run.epoch);
          const savedAt = performance.now();
          await store.saveCheckpoint(id, run.epoch, next, this.#o.limits.leaseMs);
          // The save renewed the lease too.
          run.leaseDeadline = Math.max(run.leaseDeadline, savedAt + this.#o.limits.leaseMs);
          checkpoint = next;
        },
      };
      logger.info({ transferId: id, epoch: run.epoch, resumed: checkpoint !== null }, 'transfer started');
      const result = await this.#o.execute(runnable, {
        checkpoint: port,
        signal: run.controller.signal,
        onProgress: (progress) => {
          run.progress = progress;
        },
      });
      if (run.stopReason === 'fenced' || run.stopReason === 'lease-lost') {
        await this.#settleStopped(run, null);
        return;
      }
      run.finishing = true;
      await this.#finish(run, 'COMPLETED', { result });
      logger.info({ transferId: id, epoch: run.epoch, result }, 'transfer completed');
    } catch (err) {
      if (run.stopReason !== null || SluiceError.hasCode(err, 'STALE_EPOCH')) {
        if (run.stopReason === null) run.stopReason = 'fenced';
        await this.#settleStopped(run, err);
        return;
      }
      const error = asSluiceError(err);
      if (error.code === 'STORE_UNAVAILABLE') {
        // Not the transfer's fault. It stays ours in the store: once the store answers again the heartbeat
        // finds it orphaned and runs it again from its checkpoint (or its lease lapses and a sweeper does).
        logger.warn({ transferId: id, err }, 'store unavailable mid-transfer; will resume when it is back');
        run.stopReason = 'lease-lost';
        await this.#settleStopped(run, err);
        return;
      }
      run.finishing = true;
      const ended = await this.#finish(run, error.code === 'TRANSFER_TERMINATED' ? 'TERMINATED' : 'FAILED', {
        error: { code: error.code, message: error.message },
      });
      if (ended) await this.#discard(record.request);
      logger.warn({ transferId: id, code: error.code, message: error.message }, 'transfer did not complete');
    } finally {
      await this.#cleanup(run);
    }
  }

  /** Ends a run that was asked to stop: terminate → TERMINATED, handback → release, fenced → nothing. */
  async #settleStopped(run: LocalRun, err: unknown): Promise<void> {
    if (run.settled) return;
    run.finishing = true;
    const { logger, store } = this.#o;
    switch (run.stopReason) {
      case 'terminate':
        if ((await this.#finish(run, 'TERMINATED', {})) && run.request) await this.#discard(run.request);
        logger.info({ transferId: run.id }, 'transfer terminated');
        break;
      case 'handback':
        try {
          await store.release(run.id, run.epoch);
          logger.info({ transferId: run.id, epoch: run.epoch }, 'transfer handed back');
        } catch (releaseErr) {
          logger.warn({ transferId: run.id, err: releaseErr }, 'could not release the lease');
        }
        break;
      default:
        this.#o.metrics.fenced.inc();
        logger.warn(
          { transferId: run.id, epoch: run.epoch, reason: run.stopReason, err },
          'stopped local work on a transfer this node no longer owns',
        );
    }
    if (!run.started) await this.#cleanup(run);
  }

  async #finish(
    run: LocalRun,
    to: TransferState,
    input: { result?: TransferResult; error?: { code: string; message: string } },
  ): Promise<boolean> {
    try {
      await this.#retrying(() => this.#o.store.transition(run.id, run.epoch, { to, ...input }));
      this.#o.metrics.finished.inc({ state: to });
      return true;
    } catch (err) {
      if (SluiceError.hasCode(err, 'STALE_EPOCH')) {
        this.#o.metrics.fenced.inc();
        this.#o.logger.warn({ transferId: run.id, epoch: run.epoch }, `fenced: could not record ${to}`);
      } else this.#o.logger.error({ transferId: run.id, err }, `could not record ${to}`);
      return false;
    }
  }

  /** Best effort: leftovers of a transfer that ended for good (a failure here is logged, never raised). */
  async #discard(request: TransferRequest): Promise<void> {
    if (!this.#o.discard) return;
    try {
      await this.#o.discard(this.#o.policy.confine(request));
    } catch (err) {
      this.#o.logger.warn({ transferId: request.id, err }, 'could not remove what the transfer left behind');
    }
  }

  async #cleanup(run: LocalRun): Promise<void> {
    if (run.settled) return;
    run.settled = true;
    if (this.#runs.get(run.id) === run) this.#runs.delete(run.id);
    await run.registration?.close().catch(() => {});
    run.markDone();
  }

  /** Retries a store call that failed because the store was briefly unreachable. */
  async #retrying<T>(call: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (!SluiceError.hasCode(err, 'STORE_UNAVAILABLE') || attempt >= STORE_RETRIES) throw err;
        await sleep(100 * 2 ** attempt);
      }
    }
  }

  async #submitFireAndForget(request: TransferRequest): Promise<SubmitReply> {
    const ticket = this.#fireAndForget.tryReserve();
    if (!ticket) {
      this.#o.metrics.submits.inc({ outcome: 'queue-full' });
      throw new QueueFullError(1);
    }
    const runnable = this.#o.policy.confine(request);
    const controller = new AbortController();
    this.#fireAndForgetControllers.add(controller);
    this.#fireAndForget.start(ticket, async () => {
      let checkpoint: unknown | null = null;
      try {
        const result = await this.#o.execute(runnable, {
          checkpoint: {
            load: async () => checkpoint,
            save: async (next) => {
              checkpoint = next;
            },
          },
          signal: controller.signal,
          onProgress: () => {},
        });
        this.#o.logger.info({ transferId: request.id, result }, 'fire-and-forget transfer completed');
      } catch (err) {
        this.#o.logger.warn({ transferId: request.id, err }, 'fire-and-forget transfer did not complete');
        // Nothing resumes a fire-and-forget transfer: what it staged is garbage now.
        await this.#discard(request);
      } finally {
        this.#fireAndForgetControllers.delete(controller);
      }
    });
    this.#o.metrics.submits.inc({ outcome: 'fire-and-forget' });
    return {
      status: 202,
      body: {
        id: request.id,
        mode: 'fire-and-forget',
        accepted: true,
        owner: { nodeId: this.#o.identity.nodeId, address: this.#o.identity.address },
      },
    };
  }

  /** The stored record, or `TRANSFER_NOT_FOUND`. */
  async get(id: string): Promise<TransferView> {
    const record = await this.#o.store.get(id);
    if (!record) throw new TransferNotFoundError(id);
    return transferView(record);
  }

  async list(input: { state?: TransferState; owner?: string; cursor?: string; limit?: number }) {
    const page = await this.#o.store.list({
      state: input.state,
      ownerNodeId: input.owner,
      cursor: input.cursor,
      limit: input.limit,
    });
    return { records: page.records.map(transferView), next: page.next };
  }

  /** Terminates a transfer wherever it runs; resolves with the record once the work has stopped. */
  async terminate(id: string): Promise<TransferView> {
    for (let attempt = 0; attempt < 5; attempt++) {
      const record = await this.#o.store.get(id);
      if (!record) throw new TransferNotFoundError(id);
      // Terminating again is a no-op; a transfer that finished (or finished while being stopped) cannot be.
      if (record.state === 'TERMINATED') return transferView(record);
      if (isTerminal(record.state)) throw new IllegalTransitionError(id, record.state, 'TERMINATED');
      const local = this.#runs.get(id);
      if (local && local.epoch === record.epoch) {
        this.#stop(local, 'terminate');
        await local.done;
        continue;
      }
      const answer = await this.#o.backplane.terminate(id, {
        timeoutMs: this.#o.limits.ownerWaitMs,
        ownerAddress: record.ownerAddress,
      });
      if (answer.status === 'terminated') continue;
      if (answer.status === 'unknown' && !answer.silent && !this.#leaseExpired(record))
        throw new BackplaneUnavailableError(
          `Cannot reach the owner of "${id}" (${answer.reason}); its lease is fresh, try again later`,
        );
      // Nobody runs it: take it over and record the termination ourselves (fenced like any owner write).
      try {
        const taken = await this.#o.store.takeOver(
          id,
          record.epoch,
          this.#o.identity,
          this.#o.limits.leaseMs,
        );
        const terminated = await this.#o.store.transition(id, taken.epoch, { to: 'TERMINATED' });
        this.#o.metrics.finished.inc({ state: 'TERMINATED' });
        await this.#discard(terminated.request);
        return transferView(terminated);
      } catch (err) {
        if (!SluiceError.hasCode(err, 'STALE_EPOCH') && !SluiceError.hasCode(err, 'ILLEGAL_TRANSITION'))
          throw err;
      }
    }
    return this.get(id);
  }

  /** Extends the leases of everything this node owns; stops local work the store no longer lets it own. */
  async heartbeat(): Promise<void> {
    if (this.#heartbeating || this.#closing) return;
    this.#heartbeating = true;
    const startedAt = Date.now();
    const startedMono = performance.now();
    try {
      const extended = new Set(await this.#o.store.heartbeat(this.#o.identity, this.#o.limits.leaseMs));
      for (const run of this.#runs.values()) {
        if (run.epoch === 0 || run.claimedAt >= startedAt || run.finishing || run.settled) continue;
        if (extended.has(run.id)) run.leaseDeadline = startedMono + this.#o.limits.leaseMs;
        else this.#stop(run, 'fenced');
      }
      const orphans = [...extended].filter((id) => !this.#runs.has(id) && !this.#claiming.has(id));
      if (orphans.length > 0) await this.#resumeOrphans(orphans);
      await this.#o.store.touchNode(this.#o.identity.nodeId);
    } catch (err) {
      this.#o.logger.warn({ err }, 'heartbeat failed');
    } finally {
      this.#heartbeating = false;
    }
  }

  /**
   * Stops local work whose lease ran out by this process's monotonic clock (store unreachable, or the
   * process was frozen): from then on another node may own it, so this one must not write.
   */
  #watchLeases(): void {
    const now = performance.now();
    for (const run of this.#runs.values()) {
      if (run.epoch > 0 && !run.finishing && now > run.leaseDeadline) this.#stop(run, 'lease-lost');
    }
  }

  #claimed(run: LocalRun, claimStartedAt: number): void {
    run.claimedAt = Date.now();
    run.leaseDeadline = claimStartedAt + this.#o.limits.leaseMs;
  }

  /**
   * Transfers the store says this process owns but nothing here runs (a run dropped while the store was
   * unreachable): run them again from their checkpoint, or hand them back when there is no room.
   */
  async #resumeOrphans(ids: string[]): Promise<void> {
    for (const id of ids) {
      const record = await this.#o.store.get(id);
      if (!record || isTerminal(record.state) || record.ownerInstance !== this.#o.identity.instanceId)
        continue;
      if (this.#runs.has(id) || this.#claiming.has(id) || this.#closing) continue;
      const ticket = this.#scheduler.tryReserve();
      if (!ticket) {
        await this.#o.store.release(id, record.epoch).catch(() => {});
        continue;
      }
      await this.#adopt(record, ticket, 'orphan', performance.now());
    }
  }

  /** Takes over transfers whose lease expired (as many as there is room for) and resumes them. */
  async sweep(): Promise<void> {
    if (this.#sweeping || this.#closing) return;
    this.#sweeping = true;
    const tickets: Ticket[] = [];
    try {
      for (let i = 0; i < 16; i++) {
        const ticket = this.#scheduler.tryReserve();
        if (!ticket) break;
        tickets.push(ticket);
      }
      if (tickets.length === 0) return;
      const claimStartedAt = performance.now();
      const recovered = await this.#o.store.recoverExpired(
        this.#o.identity,
        this.#o.limits.leaseMs,
        tickets.length,
      );
      for (const record of recovered) {
        const ticket = tickets.pop()!;
        await this.#adopt(record, ticket, 'sweeper', claimStartedAt);
      }
    } catch (err) {
      this.#o.logger.warn({ err }, 'sweep failed');
    } finally {
      for (const ticket of tickets) this.#scheduler.cancel(ticket);
      this.#sweeping = false;
    }
  }

  /** Runs a record this node already owns in the store (recovered by the sweeper). */
  async #adopt(
    record: TransferRecord,
    ticket: Ticket,
    via: 'sweeper' | 'orphan',
    claimStartedAt: number,
  ): Promise<void> {
    const run = this.#newRun(record.id, record.requestHash);
    run.epoch = record.epoch;
    this.#claimed(run, claimStartedAt);
    try {
      await this.#retireLocal(record.id);
      await this.#serve(run);
    } catch (err) {
      // Nothing runs it here; its lease expires again and a sweeper (maybe ours) retries.
      this.#scheduler.cancel(ticket);
      this.#o.logger.warn({ transferId: record.id, err }, 'could not serve a recovered transfer');
      return;
    }
    this.#replaceLocal(run);
    if (via === 'sweeper') this.#o.metrics.takeovers.inc({ via });
    this.#o.logger.info({ transferId: record.id, epoch: record.epoch, via }, 'resuming a transfer');
    this.#schedule(run, ticket, record);
  }

  /** A restarted node takes back at once what its previous incarnation owned (that process is gone). */
  async #adoptPreviousLife(): Promise<void> {
    try {
      for (const state of ['IN_PROGRESS', 'RECEIVED'] as const) {
        const page = await this.#o.store.list({ state, ownerNodeId: this.#o.identity.nodeId, limit: 100 });
        for (const record of page.records) {
          if (record.ownerInstance === this.#o.identity.instanceId) continue;
          if (this.#claiming.has(record.id) || this.#runs.has(record.id)) continue;
          if (this.#scheduler.free <= 0) return;
          await this.#takeOver(record, 'restart').catch((err) =>
            this.#o.logger.warn(
              { transferId: record.id, err },
              'could not adopt a transfer of a previous life',
            ),
          );
        }
      }
    } catch (err) {
      this.#o.logger.warn({ err }, 'could not list transfers of a previous life');
    }
  }

  /**
   * Graceful shutdown: stop heartbeats and sweeps, hand every transfer back (stop it, release its lease so
   * another node takes it over at once), give fire-and-forget work the grace period, then return.
   */
  async shutdown(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    if (this.#heartbeatTimer) clearInterval(this.#heartbeatTimer);
    if (this.#sweepTimer) clearInterval(this.#sweepTimer);
    if (this.#watchdogTimer) clearInterval(this.#watchdogTimer);
    await Promise.allSettled([...this.#claiming.values()]);
    const runs = [...this.#runs.values()];
    for (const run of runs) this.#stop(run, 'handback');
    const grace = this.#o.limits.shutdownGraceMs;
    const timeout = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());
    await Promise.race([Promise.all(runs.map((run) => run.done)), timeout(grace)]);
    await Promise.race([this.#fireAndForget.idle(), timeout(grace)]);
    for (const controller of this.#fireAndForgetControllers) controller.abort();
  }
}
