import {
  IdempotencyConflictError,
  isTerminal,
  matchesStoredRequest,
  PathNotAccessibleError,
  type PipelineProgress,
  QueueFullError,
  requestHash,
  ShuttingDownError,
  SluiceError,
  TransferNotFoundError,
  type TransferRecord,
  type TransferRequest,
  type TransferState,
} from '@sluice/core';
import { type ClaimResult, claim } from './claim.js';
import type { CoordinatorOptions, CoordinatorState } from './context.js';
import { stopRun } from './execution.js';
import { FireAndForget } from './fire-and-forget.js';
import { LeaseKeeper } from './leases.js';
import { StopReason } from './local-run.js';
import { ownerChange, whoRuns } from './owner-lookup.js';
import { RecentIds } from './recent-ids.js';
import { Recovery } from './recovery.js';
import { checkDistinctFiles, checkRequestShape } from './request-rules.js';
import { Scheduler, type Ticket } from './scheduler.js';
import type { Submission } from './submission.js';
import { terminate } from './terminate.js';
import { type ProgressView, reportedProgress, type TransferView, transferView } from './view.js';

export type { CoordinatorLimits, CoordinatorOptions, TransferExecutor } from './context.js';
export { type Submission, submissionReply } from './submission.js';

const WATCHDOG_MS = 20;
const SUBMIT_PASSES = 8;
/** Longest a GET or a list waits for another node's owner to report progress (the record is answered either way). */
const PROGRESS_WAIT_MS = 500;
/** Owners asked for their progress while listing one page of transfers; the page's later running ones show none. */
const LIST_PROGRESS_ASKS = 100;
/** How often the fire-and-forget journal is swept again after the sweep at start (fire-and-forget.ts). */
const FIRE_AND_FORGET_SWEEP_MS = 600_000;
/** How many ids seen stored a node remembers to answer their resends with one read (about 1 MiB at 100-character ids). */
const RECENT_IDS = 10_000;

/**
 * The idempotence protocol of docs/architecture.md § Protocol 1 on top of the store and backplane ports. This class only
 * composes; each job lives in its own module (docs/coordinator.md): the run lifecycle (local-run.ts), the one
 * claim wrapper (claim.ts), execution and settling (execution.ts), leases (leases.ts), recovery
 * (recovery.ts), terminate (terminate.ts) and fire-and-forget (fire-and-forget.ts).
 *
 * @example
 * ```ts
 * const coordinator = new TransferCoordinator({ store, backplane, identity, limits, policy, execute, metrics, logger, clock });
 * coordinator.start();
 * const submission = await coordinator.submit(parseTransferRequest(body)); // { outcome: 'created', transfer }
 * await coordinator.shutdown();
 * ```
 */
export class TransferCoordinator {
  readonly #state: CoordinatorState;
  readonly #leases: LeaseKeeper;
  readonly #recovery: Recovery;
  readonly #fireAndForget: FireAndForget;
  readonly #timers: NodeJS.Timeout[] = [];
  /** Ids seen stored lately: their resends read first (docs/coordinator.md § Submitting inserts first). */
  readonly #stored = new RecentIds(RECENT_IDS);

  constructor(options: CoordinatorOptions) {
    this.#state = {
      o: options,
      runs: new Map(),
      claiming: new Map(),
      scheduler: new Scheduler({
        concurrency: options.limits.maxConcurrentTransfers,
        queueSize: options.limits.queueSize,
      }),
      heartbeatGeneration: 0,
      closing: false,
      confirmLease: (run) => this.#leases.confirm(run),
      hasLeaseToStart: (run) => this.#leases.hasLeaseToStart(run),
    };
    this.#recovery = new Recovery(this.#state);
    this.#leases = new LeaseKeeper(this.#state, (ids) => this.#recovery.resumeOrphans(ids));
    this.#fireAndForget = new FireAndForget(options);
  }

  /** Counts for metrics. */
  stats(): { running: number; queued: number; fireAndForget: number } {
    return {
      running: this.#state.scheduler.running,
      queued: this.#state.scheduler.queued,
      fireAndForget: this.#fireAndForget.pending,
    };
  }

  /**
   * Starts heartbeats and the sweeper, adopts the transfers a previous life of this node left behind, and removes
   * what its fire-and-forget runs left in their destinations.
   */
  start(): void {
    const { limits } = this.#state.o;
    this.#timers.push(
      setInterval(() => void this.heartbeat(), limits.heartbeatMs),
      setInterval(() => void this.sweep(), limits.sweepIntervalMs),
      // Frequent and cheap, so that after a freeze it fires before the pipeline's own timers write anything.
      setInterval(() => this.#leases.watch(), WATCHDOG_MS),
      // Again now and then: an entry whose destination was unreachable at start.
      setInterval(() => void this.#fireAndForget.sweepLeftovers(), FIRE_AND_FORGET_SWEEP_MS),
    );
    void this.adoptPreviousLife();
    void this.#fireAndForget.sweepLeftovers();
  }

  /**
   * Takes back the transfers a previous life of this node id owned (a restart), as far as this node has room;
   * `start` runs it once. Transfers a still-live instance answers for are left to it.
   */
  adoptPreviousLife(): Promise<void> {
    return this.#recovery.adoptPreviousLife();
  }

  /** Extends the leases of everything this node owns; stops local work the store no longer lets it own. */
  heartbeat(): Promise<void> {
    return this.#leases.heartbeat();
  }

  /** Takes over transfers whose lease expired (as many as there is room for) and resumes them. */
  sweep(): Promise<void> {
    return this.#recovery.sweep();
  }

  /** Submits a parsed transfer request (paths not yet confined) and says what came of it. */
  async submit(request: TransferRequest): Promise<Submission> {
    if (this.#state.closing) throw new ShuttingDownError();
    // Confinement and connection checks first: bad input must never write anything. A run this submit
    // claims uses the confined request as it is (one `realpath` per file path per transfer, not three).
    const runnable = await this.#confine(request);
    await this.#checkRunnable(request, runnable);
    if (request.mode === 'fire-and-forget')
      return this.#fireAndForget.submit(runnable, this.#state.o.identity);
    // The fingerprint is the request's as sent (a resend of the same text matches on any node); the record keeps
    // its file paths anchored to this node's working directory, so every node that resumes it means the same files.
    const hash = requestHash(request);
    const recorded = this.#state.o.policy.anchor(request);
    for (let pass = 0; pass < SUBMIT_PASSES; pass++) {
      const submission = await this.#submitOnce(recorded, hash, runnable);
      if (submission) return submission;
    }
    // Every pass found the world changed under it: answer by the record as it is now — a finished one with its
    // stored outcome (a resend is owed it), another request with the conflict — else as running elsewhere.
    const record = await this.#state.o.store.get(request.id);
    if (!record) throw new TransferNotFoundError(request.id);
    return this.#storedAnswer(record, hash) ?? this.#running(record, false, 'contended');
  }

  /**
   * What a resend is owed by the stored record alone: `IDEMPOTENCY_CONFLICT` when it is another request under the
   * same id, its stored outcome when it is finished; null while it is not finished.
   */
  #storedAnswer(record: TransferRecord, hash: string): Submission | null {
    const { metrics } = this.#state.o;
    if (!matchesStoredRequest(record, hash)) {
      metrics.submits.inc({ outcome: 'conflict' });
      throw new IdempotencyConflictError(record.id);
    }
    if (!isTerminal(record.state)) return null;
    metrics.submits.inc({ outcome: 'terminal' });
    return { outcome: 'stored', transfer: transferView(record) };
  }

  /**
   * The request confined to the roots. The access check reads the file system as it is now, so a path the
   * server's user may no longer read or write (`PATH_NOT_ACCESSIBLE`) refuses only a request not yet recorded:
   * a resend of a recorded one is owed its record (a finished one its stored outcome), whatever has changed
   * since. Confinement itself (the roots, impossible paths) still refuses every request.
   */
  async #confine(request: TransferRequest): Promise<TransferRequest> {
    const { policy, store } = this.#state.o;
    try {
      return policy.confine(request);
    } catch (err) {
      if (!(err instanceof PathNotAccessibleError) || request.mode === 'fire-and-forget') throw err;
      if ((await store.get(request.id)) === null) throw err;
      return policy.confine(request, { access: false });
    }
  }

  /**
   * Refuses a request that can never run (`request-rules.ts`: a `query` source without `key`, source-only fields
   * on a destination, a file copied onto itself) as `VALIDATION_FAILED` — unless it is recorded already (accepted
   * by an earlier version): a resend is owed its record, as for {@link #confine}'s access check.
   */
  async #checkRunnable(request: TransferRequest, runnable: TransferRequest): Promise<void> {
    try {
      checkRequestShape(request);
      checkDistinctFiles(runnable);
    } catch (err) {
      if (request.mode === 'fire-and-forget' || (await this.#state.o.store.get(request.id)) === null)
        throw err;
    }
  }

  /**
   * One pass of the protocol; null means "the world changed under us, look again". `request` is the one a new
   * record keeps (its file paths anchored: {@link RequestPolicy.anchor}), `hash` the fingerprint of the one sent.
   */
  async #submitOnce(
    request: TransferRequest,
    hash: string,
    runnable: TransferRequest,
  ): Promise<Submission | null> {
    const { store, metrics, identity } = this.#state.o;
    const id = request.id;
    const pending = this.#state.claiming.get(id);
    if (pending) await pending.catch(() => {});
    let record: TransferRecord | null;
    const inserted = await this.#insertFirst(request, hash, runnable);
    if (inserted === undefined) {
      record = await store.get(id);
      if (!record) {
        const result = await this.#claimNew(request, hash, runnable, await this.#reserve());
        if (result.status !== 'claimed') return null;
        return this.#created(result.record);
      }
    } else if (inserted.status === 'claimed') {
      return this.#created(inserted.record);
    } else if (inserted.status === 'exists') {
      record = inserted.record;
    } else {
      return null;
    }
    this.#stored.add(id);
    const stored = this.#storedAnswer(record, hash);
    if (stored) return stored;
    const local = this.#state.runs.get(id);
    if (local && local.epoch === record.epoch && local.active)
      return this.#running(record, true, 'owner', { nodeId: identity.nodeId, address: identity.address });
    const answer = await whoRuns(this.#state, record);
    const change = ownerChange(answer);
    // An owner at a newer epoch than the record read: the record moved on meanwhile (a takeover here or
    // elsewhere). Look again, so the answer names the owner with its own epoch, attempts and lease.
    if (answer.status === 'owner' && answer.owner.epoch > record.epoch) return null;
    if (answer.status === 'owner')
      return this.#running(record, true, 'owner', {
        nodeId: answer.owner.nodeId,
        address: answer.owner.address,
      });
    const result = await claim(
      this.#state,
      {
        via: 'takeover',
        record,
        cause: 'resubmit',
        requireExpiredLease: change === 'after-lease',
        // No `runnable`: the run resumes the record's request, confined here. The resend's own confined paths
        // have the same fingerprint, yet a relative path in it names a file of *this* node's working directory,
        // not the one the record was accepted for (test/exactly-once-control.test.ts).
      },
      await this.#reserve(),
    );
    if (result.status === 'lease-held') {
      // The backplane could not tell (or said "nobody" of an owner past its fenced finishing step, which may be
      // publishing cut off from the backplane) and the lease is fresh by the store's clock: a busy owner looks the
      // same, and a resubmit must never cost a healthy run. Its lease (the sweeper) decides.
      this.#state.o.logger.warn(
        { transferId: id, reason: answer.status === 'unknown' ? answer.reason : 'finishing, not answering' },
        'backplane cannot tell who runs the transfer; the lease is fresh, so it is not taken over',
      );
      return this.#running(record, false, 'owner-unconfirmed');
    }
    if (result.status !== 'claimed') return null;
    metrics.submits.inc({ outcome: 'resumed' });
    return { outcome: 'resumed', transfer: transferView(result.record) };
  }

  /**
   * A submit of an id this node neither runs nor is claiming inserts first: one store statement both creates a
   * new transfer and, on conflict, returns the stored record (docs/coordinator.md § Submitting inserts first).
   * Its queue place is provisional: a new id that finds no place free waits for it instead of being refused, so a
   * duplicate never costs another submit a `429`. Undefined when it does not apply: the id is known here (its
   * local run decides, or it was seen stored: a resend is one read), or no place is free — a duplicate then gets
   * its stored answer, never a `429`.
   */
  async #insertFirst(
    request: TransferRequest,
    hash: string,
    runnable: TransferRequest,
  ): Promise<ClaimResult | undefined> {
    const state = this.#state;
    const id = request.id;
    if (state.runs.has(id) || state.claiming.has(id) || this.#stored.has(id)) return undefined;
    const ticket = state.scheduler.tryReserve({ provisional: true });
    if (!ticket) return undefined;
    return this.#claimNew(request, hash, runnable, ticket);
  }

  async #claimNew(
    request: TransferRequest,
    hash: string,
    runnable: TransferRequest,
    ticket: Ticket,
  ): Promise<ClaimResult> {
    try {
      return await claim(this.#state, { via: 'new', request, hash, runnable }, ticket);
    } catch (err) {
      if (SluiceError.hasCode(err, 'IDEMPOTENCY_CONFLICT'))
        this.#state.o.metrics.submits.inc({ outcome: 'conflict' });
      throw err;
    }
  }

  #created(record: TransferRecord): Submission {
    this.#stored.add(record.id);
    this.#state.o.metrics.submits.inc({ outcome: 'created' });
    return { outcome: 'created', transfer: transferView(record) };
  }

  #running(
    record: TransferRecord,
    confirmed: boolean,
    outcome: string,
    owner?: { nodeId: string; address: string | null },
  ): Submission {
    this.#state.o.metrics.submits.inc({ outcome });
    const transfer = transferView(record);
    if (owner) transfer.owner = owner;
    return { outcome: 'running', transfer, confirmed };
  }

  async #reserve(): Promise<Ticket> {
    const ticket = await this.#state.scheduler.reserve();
    if (!ticket) {
      this.#state.o.metrics.submits.inc({ outcome: 'queue-full' });
      throw new QueueFullError(1);
    }
    return ticket;
  }

  /**
   * The stored record, or `TRANSFER_NOT_FOUND`. A transfer running on another node shows the progress its owner
   * reports over the backplane (asked for at most {@link PROGRESS_WAIT_MS}; none when it does not answer in time):
   * behind a load balancer a client's GET lands on any node.
   */
  async get(id: string): Promise<TransferView> {
    const record = await this.#state.o.store.get(id);
    if (!record) throw new TransferNotFoundError(id);
    return transferView(record, await this.#progress(record));
  }

  /**
   * The progress of `record`'s run: this node's own, or the one its owner on another node reports (null when it
   * does not answer in time, runs another epoch, or the transfer is not in progress).
   */
  async #progress(record: TransferRecord, remote = true): Promise<PipelineProgress | ProgressView | null> {
    const local = this.#localProgress(record);
    if (local) return local;
    if (!remote) return null;
    if (record.state !== 'IN_PROGRESS' || record.ownerNodeId === null) return null;
    if (record.ownerNodeId === this.#state.o.identity.nodeId) return null;
    return this.#remoteProgress(record);
  }

  /** The progress the owner of `record`'s epoch reports, or null (no answer in time, another epoch, none sent). */
  async #remoteProgress(record: TransferRecord): Promise<ProgressView | null> {
    const { backplane, limits } = this.#state.o;
    try {
      const answer = await backplane.whoRuns(record.id, {
        timeoutMs: Math.min(limits.ownerWaitMs, PROGRESS_WAIT_MS),
        ownerAddress: record.ownerAddress,
        ownerInstance: record.ownerInstance,
      });
      if (answer.status !== 'owner' || answer.owner.epoch !== record.epoch) return null;
      return reportedProgress(answer.owner.progress);
    } catch {
      return null; // progress is a courtesy: the record itself is the answer
    }
  }

  async list(input: { state?: TransferState; owner?: string; cursor?: string; limit?: number }) {
    const page = await this.#state.o.store.list({
      ...(input.state !== undefined ? { state: input.state } : {}),
      ...(input.owner !== undefined ? { ownerNodeId: input.owner } : {}),
      ...(input.cursor !== undefined ? { cursor: input.cursor } : {}),
      ...(input.limit !== undefined ? { limit: input.limit } : {}),
    });
    // Every running transfer of the page shows its progress, wherever it runs (the console's table lists them all):
    // the owners are asked at once, so a page waits at most one PROGRESS_WAIT_MS for the slowest.
    // At most LIST_PROGRESS_ASKS owners' answers per page (a page may hold up to `http.pageSizeMax` records).
    let asks = 0;
    const progress = await Promise.all(
      page.records.map((record) => {
        const remote = record.state === 'IN_PROGRESS' && asks < LIST_PROGRESS_ASKS;
        if (remote) asks++;
        return this.#progress(record, remote);
      }),
    );
    return {
      records: page.records.map((record, i) => transferView(record, progress[i] ?? null)),
      next: page.next,
    };
  }

  /** This node's progress of a transfer it runs under the record's epoch (none for another owner's). */
  #localProgress(record: TransferRecord) {
    const run = this.#state.runs.get(record.id);
    return run && run.epoch === record.epoch ? run.progress : null;
  }

  /** Terminates a transfer wherever it runs; resolves with the record once the work has stopped. */
  terminate(id: string): Promise<TransferView> {
    return terminate(this.#state, id);
  }

  /**
   * Graceful shutdown: stop heartbeats and sweeps, wait for claims and adoptions in flight, hand every
   * transfer back (stop it, release its lease so another node takes it over at once), give fire-and-forget
   * work the grace period, then return.
   */
  async shutdown(): Promise<void> {
    const state = this.#state;
    if (state.closing) return;
    state.closing = true;
    for (const timer of this.#timers) clearInterval(timer);
    await Promise.allSettled([...state.claiming.values()]);
    await this.#recovery.idle();
    await Promise.allSettled([...state.claiming.values()]);
    const runs = [...state.runs.values()];
    for (const run of runs) stopRun(state, run, StopReason.handback);
    const grace = state.o.limits.shutdownGraceMs;
    const timeout = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());
    // Both within one grace period (the process's hard stop counts on it).
    await Promise.all([
      Promise.race([Promise.all(runs.map((run) => run.done)), timeout(grace)]),
      this.#fireAndForget.drain(grace),
    ]);
  }
}
