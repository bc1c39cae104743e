import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { connect, Empty, RequestError, TimeoutError } from '@nats-io/transport-node';
import type {
  Backplane,
  BackplaneStatus,
  Logger,
  OwnerAnswer,
  Registration,
  SluiceEvent,
  SubscribeOptions,
  TerminateAnswer,
  TransferResponder,
  UnknownAnswer,
  WhoRunsOptions,
} from '@sluice/core';
import { BackplaneUnavailableError, PayloadTooLargeError, SluiceError, silentLogger } from '@sluice/core';
import { type LocalSide, localOwner, localTerminate } from '../shared/local-first.js';
import { LocalRegistry } from '../shared/local-registry.js';
import { StatusTracker } from '../shared/status.js';
import {
  checkEvent,
  checkTimeout,
  checkTransferId,
  DEFAULT_MAX_MESSAGE_BYTES,
  decodeJson,
  logDropped,
  OwnerReplySchema,
  TerminateReplySchema,
} from '../shared/wire.js';
import { AliasStore } from './alias-store.js';
import { checkNatsBackplaneOptions, type NatsBackplaneOptions } from './backplane-options.js';
import {
  Backoff,
  DEFAULT_RECONNECT,
  natsConnectionOptions,
  type ReconnectPolicy,
} from './connection-options.js';
import { NatsEventFanout } from './event-fanout.js';
import { answerTransferRequest, type OwnerSide } from './owner-side.js';
import { Subjects } from './subjects.js';

/** The `unknown` answer of a failed request (keeping `silent` when the owner merely did not answer in time). */
function unknownOf(failure: { reason: string; silent?: boolean }): UnknownAnswer {
  return { status: 'unknown', reason: failure.reason, ...(failure.silent ? { silent: true } : {}) };
}

/**
 * The cluster backplane over NATS. An owner answers on subjects specific to its transfer, so a query for a
 * transfer nobody runs fails at once with "no responders" (→ `nobody`), a slow owner is waited for up to the
 * caller's timeout, and when NATS itself cannot be reached — or this node's own connection is not settled — the
 * answer is `unknown`, never `nobody`. Subscriptions and responders survive NATS restarts (the client
 * re-subscribes on reconnect). Alias events travel on per-host subjects and KV keys.
 *
 * @example
 * ```ts
 * await using backplane = await createNatsBackplane({ nats: 'nats://127.0.0.1:4222', clusterName: 'prod', nodeId: 'n1' });
 * const answer = await backplane.whoRuns('t-1', { timeoutMs: 2000 }); // owner | nobody | unknown
 * ```
 */
export class NatsBackplane implements Backplane {
  readonly nodeId: string;
  readonly subjects: Subjects;
  readonly #nc: NatsConnection;
  readonly #logger: Logger;
  readonly #registry = new LocalRegistry();
  /** This process's side of "who runs X?", asked before NATS. */
  readonly #local: LocalSide;
  readonly #status: StatusTracker;
  readonly #backoff: Backoff;
  readonly #aliases: AliasStore;
  readonly #events: NatsEventFanout;
  readonly #ownerSide: OwnerSide;
  readonly #maxBytes: number;
  readonly #timeoutMs: number;
  readonly #settleMs: number;
  readonly #aliasHost: string | undefined;
  /** Until when this node's own connection counts as unsettled (it dropped, reconnected or went stale). */
  #unsettledUntil = Number.NEGATIVE_INFINITY;
  #closing: Promise<void> | null = null;
  readonly #statusLoop: Promise<void>;

  /** Use {@link createNatsBackplane}. */
  constructor(
    nc: NatsConnection,
    options: NatsBackplaneOptions & { backoff: Backoff; settleMs: number; bucket: string },
  ) {
    this.#nc = nc;
    this.nodeId = options.nodeId;
    this.subjects = new Subjects(options.clusterName);
    this.#logger = options.logger ?? silentLogger;
    this.#local = { registry: this.#registry, nodeId: this.nodeId, logger: this.#logger };
    this.#backoff = options.backoff;
    this.#settleMs = options.settleMs;
    this.#aliasHost = options.aliasHost;
    this.#maxBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.#timeoutMs = options.operationTimeoutMs ?? 5_000;
    this.#status = new StatusTracker('connected', this.#logger);
    this.#aliases = new AliasStore(nc, {
      bucket: options.bucket,
      logger: this.#logger,
      maxBytes: this.#maxBytes,
      timeoutMs: this.#timeoutMs,
    });
    this.#ownerSide = {
      registry: this.#registry,
      nodeId: this.nodeId,
      logger: this.#logger,
      maxBytes: this.#maxBytes,
    };
    this.#events = new NatsEventFanout({
      nc,
      subjects: this.subjects,
      aliases: this.#aliases,
      logger: this.#logger,
      maxBytes: this.#maxBytes,
      aliasHost: this.#aliasHost,
      connected: () => this.#connected(),
      flush: () => this.#flush(),
    });
    this.#statusLoop = this.#watchConnection();
  }

  /** The JetStream KV bucket holding the latest redirect per alias. */
  get kvBucket(): string {
    return this.#aliases.bucket;
  }

  async #watchConnection(): Promise<void> {
    try {
      for await (const s of this.#nc.status()) {
        switch (s.type) {
          case 'disconnect':
            this.#unsettle();
            this.#logger.warn({ server: s.server }, 'backplane lost its NATS connection; reconnecting');
            this.#status.set('reconnecting');
            break;
          case 'reconnecting':
            this.#unsettle();
            this.#backoff.failure();
            this.#status.set('reconnecting');
            break;
          case 'reconnect':
            this.#backoff.reset();
            // Owners that have not reconnected yet cannot answer: "no responders" means nothing for a while.
            this.#unsettle();
            this.#logger.info({ server: s.server }, 'backplane reconnected to NATS');
            this.#status.set('connected');
            void this.#events.replayAliasState();
            break;
          case 'staleConnection':
            this.#unsettle();
            break;
          case 'error':
            this.#logger.warn({ err: s.error }, 'NATS reported an error');
            break;
          case 'close':
            this.#status.set('closed');
            break;
          default:
            break;
        }
      }
    } catch (err) {
      this.#logger.error({ err }, 'backplane status loop failed');
    }
    await this.#nc.closed().catch(() => undefined);
    if (!this.#closing) this.#logger.error({}, 'NATS connection closed unexpectedly; backplane is closed');
    this.#status.set('closed');
  }

  #unsettle(): void {
    this.#unsettledUntil = Math.max(this.#unsettledUntil, Date.now() + this.#settleMs);
  }

  /** Connected, and not within the settle window of a drop, reconnect or stale connection. */
  #settled(): boolean {
    return this.#connected() && Date.now() >= this.#unsettledUntil;
  }

  /**
   * Whether the server answers a ping within `timeoutMs`: after a request timed out, this tells an owner that
   * did not answer (server fine → `silent`) from a server or connection that is itself stalled (e.g. a paused
   * nats-server, where the owner may be fine).
   */
  #serverAnswers(timeoutMs: number): Promise<boolean> {
    return this.#flush(timeoutMs);
  }

  #connected(): boolean {
    return this.#status.get() === 'connected' && !this.#nc.isClosed() && !this.#nc.isDraining();
  }

  /** Waits until the server has processed everything sent so far, at most `timeoutMs` (the operation timeout). */
  async #flush(timeoutMs = this.#timeoutMs): Promise<boolean> {
    if (!this.#connected()) return false;
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        this.#nc.flush().then(() => true),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), timeoutMs);
        }),
      ]);
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  #assertOpen(): void {
    if (this.#closing || this.#nc.isClosed()) throw new BackplaneUnavailableError('The backplane is closed');
  }

  async serve(transferId: string, responder: TransferResponder): Promise<Registration> {
    this.#assertOpen();
    const id = checkTransferId(transferId);
    const remove = this.#registry.add(id, responder);
    let sub: Subscription;
    try {
      sub = this.#nc.subscribe(this.subjects.transferWildcard(id), {
        callback: (err, msg) => {
          if (err) this.#logger.warn({ err, transferId: id }, 'transfer subscription error');
          else answerTransferRequest(this.#ownerSide, id, msg);
        },
      });
    } catch (err) {
      remove();
      throw new BackplaneUnavailableError(`Cannot serve transfer "${id}" on NATS`, { cause: err });
    }
    // Resolve only once the server knows the subscription: the caller marks the record IN_PROGRESS next, and a
    // query in between must not get "no responders". While disconnected the client sends it on reconnect.
    if (!(await this.#flush())) {
      this.#logger.warn(
        { transferId: id },
        'serving while NATS is unreachable; the owner will answer after reconnecting',
      );
    }
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      remove();
      try {
        sub.unsubscribe();
      } catch {
        // Already gone with the connection.
      }
      await this.#flush();
    };
    return { close, [Symbol.asyncDispose]: close };
  }

  /**
   * Classifies a failed request. Only "no responders" on a settled connection (asked while settled, and still
   * settled when the answer came) is a certain "nobody" — answered at once, so a resend after an owner's crash
   * is taken over in milliseconds. A timeout is `silent` (someone is subscribed but did not answer: a hung
   * owner) only if the connection is settled and the server still answers a ping; a stalled server or
   * connection makes it plain `unknown`. The library's typed errors decide, never `err.name` strings.
   */
  async #failure(
    err: unknown,
    timeoutMs: number,
    settledWhenAsked: boolean,
  ): Promise<{ nobody: true } | { nobody: false; reason: string; silent?: boolean }> {
    if (err instanceof RequestError && err.isNoResponders()) {
      if (!settledWhenAsked || !this.#settled()) {
        return {
          nobody: false,
          reason: `no responders, but this node's NATS connection is ${this.#status.get()} and not settled: owners may not be back yet`,
        };
      }
      return { nobody: true };
    }
    const timedOut =
      err instanceof TimeoutError || (err instanceof RequestError && err.cause instanceof TimeoutError);
    if (timedOut) {
      const reason = `the owner did not answer within ${timeoutMs} ms`;
      if (!settledWhenAsked || !this.#settled()) return { nobody: false, reason };
      const probeMs = Math.max(50, Math.min(timeoutMs, 500));
      if (!(await this.#serverAnswers(probeMs))) {
        this.#unsettle();
        return {
          nobody: false,
          reason: `${reason}, and NATS itself did not answer a ping within ${probeMs} ms`,
        };
      }
      return { nobody: false, reason, silent: true };
    }
    return { nobody: false, reason: `NATS request failed: ${(err as Error)?.message ?? String(err)}` };
  }

  async whoRuns(transferId: string, options: WhoRunsOptions): Promise<OwnerAnswer> {
    const id = checkTransferId(transferId);
    const timeoutMs = checkTimeout(options.timeoutMs);
    const local = localOwner(this.#local, id);
    if (local) return local;
    if (!this.#connected()) return { status: 'unknown', reason: `NATS is ${this.#status.get()}` };
    const settled = this.#settled();
    let msg: Msg;
    try {
      msg = await this.#nc.request(this.subjects.owner(id), Empty, { timeout: timeoutMs });
    } catch (err) {
      const failure = await this.#failure(err, timeoutMs, settled);
      return failure.nobody ? { status: 'nobody' } : unknownOf(failure);
    }
    const reply = decodeJson(msg.data, OwnerReplySchema, this.#maxBytes);
    if (!reply.ok) {
      logDropped(this.#logger, msg.subject, reply.reason, msg.data);
      return { status: 'unknown', reason: `malformed owner reply (${reply.reason})` };
    }
    if (!reply.value.ok) return { status: 'unknown', reason: reply.value.error };
    return { status: 'owner', owner: reply.value.owner };
  }

  async terminate(transferId: string, options: WhoRunsOptions): Promise<TerminateAnswer> {
    const id = checkTransferId(transferId);
    const timeoutMs = checkTimeout(options.timeoutMs);
    const local = await localTerminate(this.#local, id);
    if (local) return local;
    if (!this.#connected()) return { status: 'unknown', reason: `NATS is ${this.#status.get()}` };
    const settled = this.#settled();
    let msg: Msg;
    try {
      msg = await this.#nc.request(this.subjects.terminate(id), Empty, { timeout: timeoutMs });
    } catch (err) {
      const failure = await this.#failure(err, timeoutMs, settled);
      return failure.nobody ? { status: 'not-running' } : unknownOf(failure);
    }
    const reply = decodeJson(msg.data, TerminateReplySchema, this.#maxBytes);
    if (!reply.ok) {
      logDropped(this.#logger, msg.subject, reply.reason, msg.data);
      return { status: 'unknown', reason: `malformed terminate reply (${reply.reason})` };
    }
    if (!reply.value.ok) return { status: 'unknown', reason: reply.value.error };
    return { status: 'terminated', by: reply.value.by };
  }

  async publish(event: SluiceEvent): Promise<void> {
    this.#assertOpen();
    const valid = checkEvent(event);
    const json = JSON.stringify(valid);
    if (Buffer.byteLength(json) > this.#maxBytes) throw new PayloadTooLargeError(this.#maxBytes);
    if (!this.#connected()) {
      throw new BackplaneUnavailableError(`Cannot publish ${valid.type}: NATS is ${this.#status.get()}`);
    }
    try {
      this.#nc.publish(this.subjects.eventOf(valid), json);
    } catch (err) {
      throw new BackplaneUnavailableError(`Cannot publish ${valid.type}`, { cause: err });
    }
    if (valid.type === 'AliasRedirected') {
      try {
        await this.#aliases.put(valid);
      } catch (err) {
        throw new BackplaneUnavailableError(
          `Published ${valid.type} for "${valid.alias}" but could not store it in KV bucket ${this.kvBucket}`,
          { cause: err },
        );
      }
    } else if (!(await this.#flush())) {
      throw new BackplaneUnavailableError(`Cannot confirm that ${valid.type} reached NATS`);
    }
  }

  async subscribe(
    handler: (event: SluiceEvent) => void | Promise<void>,
    options?: SubscribeOptions,
  ): Promise<Registration> {
    this.#assertOpen();
    return this.#events.subscribe(handler, options);
  }

  async latestAliasEvents(): Promise<SluiceEvent[]> {
    this.#assertOpen();
    if (!this.#connected()) {
      throw new BackplaneUnavailableError(`Cannot read the alias state: NATS is ${this.#status.get()}`);
    }
    try {
      return await this.#aliases.list(this.#aliasHost);
    } catch (err) {
      throw new BackplaneUnavailableError(`Cannot read KV bucket ${this.kvBucket}`, { cause: err });
    }
  }

  status(): BackplaneStatus {
    return this.#status.get();
  }

  onStatus(listener: (status: BackplaneStatus) => void): () => void {
    return this.#status.on(listener);
  }

  /** Drains: in-flight messages are handled and pending publishes flushed, then the connection closes. */
  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  async #shutdown(): Promise<void> {
    // Responders stay registered while draining, so queries already routed here are still answered.
    if (!this.#nc.isClosed()) {
      try {
        if (this.#status.get() === 'connected') {
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([
            this.#nc.drain(),
            new Promise((resolve) => {
              timer = setTimeout(resolve, this.#timeoutMs);
            }),
          ]).finally(() => clearTimeout(timer));
        }
      } catch (err) {
        this.#logger.debug({ err }, 'drain failed; closing');
      }
      if (!this.#nc.isClosed()) await this.#nc.close().catch(() => undefined);
    }
    this.#registry.clear();
    this.#events.clear();
    await this.#statusLoop;
    this.#status.set('closed');
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/**
 * Connects to NATS and returns the cluster backplane. The first connection must succeed (bad credentials or an
 * unreachable server fail here with `BACKPLANE_UNAVAILABLE`); after that it reconnects forever with backoff.
 *
 * @example
 * ```ts
 * await using backplane = await createNatsBackplane({ nats: 'nats://127.0.0.1:4222', clusterName: 'prod', nodeId: 'n1' });
 * await using _ = await backplane.serve('t-1', { report: () => ({ nodeId: 'n1', address, epoch }), terminate: stop });
 * await backplane.whoRuns('t-2', { timeoutMs: 2000 }); // { status: 'nobody' } in about a millisecond
 * ```
 */
export async function createNatsBackplane(options: NatsBackplaneOptions): Promise<NatsBackplane> {
  const bucket = checkNatsBackplaneOptions(options);
  const policy: ReconnectPolicy = { ...DEFAULT_RECONNECT, ...options.reconnect };
  const backoff = new Backoff(policy);
  const connectionOptions = natsConnectionOptions(options.nats, `sluice:${options.nodeId}`, backoff);
  let nc: NatsConnection;
  try {
    nc = await connect(connectionOptions);
  } catch (err) {
    if (SluiceError.isInstance(err)) throw err;
    throw new BackplaneUnavailableError(`Cannot connect to NATS: ${(err as Error).message}`, { cause: err });
  }
  const settleMs = options.reconnectSettleMs ?? 2 * policy.maxDelayMs + 500;
  return new NatsBackplane(nc, { ...options, backoff, settleMs, bucket });
}
