import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { connect, Empty, RequestError } from '@nats-io/transport-node';
import type {
  AliasRedirected,
  Backplane,
  BackplaneStatus,
  Logger,
  NatsConfig,
  OwnerAnswer,
  Registration,
  SluiceEvent,
  SubscribeOptions,
  TerminateAnswer,
  TransferResponder,
  UnknownAnswer,
  WhoRunsOptions,
} from '@sluice/core';
import {
  BackplaneUnavailableError,
  ConfigError,
  PayloadTooLargeError,
  SluiceError,
  SluiceEventSchema,
  silentLogger,
} from '@sluice/core';
import { aliasEventKey, isOlderAliasEvent } from '../shared/alias-latest.js';
import { OrderedDelivery } from '../shared/delivery.js';
import { checkSubscribeTypes } from '../shared/local-events.js';
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
import {
  Backoff,
  DEFAULT_RECONNECT,
  natsConnectionOptions,
  type ReconnectPolicy,
} from './connection-options.js';
import { defaultKvBucket, isValidBucketName, Subjects } from './subjects.js';

export interface NatsBackplaneOptions {
  /** A URL, or servers plus credentials (user/pass, token, nkey seed, creds file) and TLS. */
  nats: NatsConfig;
  /** Prefix of every subject; nodes of one cluster must agree on it. */
  clusterName: string;
  /** This node's id (connection name; `by` of terminate acknowledgements). */
  nodeId: string;
  logger?: Logger;
  /** JetStream KV bucket for the latest `AliasRedirected` per alias (default `sluice-aliases-<cluster>`). */
  kvBucket?: string;
  /** Reconnect backoff (default 50 ms doubling up to 1000 ms, with jitter); reconnection never gives up. */
  reconnect?: Partial<ReconnectPolicy>;
  /**
   * For this long after a *re*connect, "no responders" is reported as `unknown` rather than `nobody`: owners that
   * have not reconnected yet cannot answer, and a wrong "nobody" would start the transfer twice.
   * Default: twice the maximum reconnect delay plus 500 ms.
   */
  reconnectSettleMs?: number;
  /** Largest event, report or reply in bytes (default 64 KiB). */
  maxMessageBytes?: number;
  /** Upper bound of JetStream calls and of flushes (default 5000 ms). */
  operationTimeoutMs?: number;
}

interface EventSubscription {
  delivery: OrderedDelivery;
  sub: Subscription;
  /** The last redirect handed to this subscriber per alias (to drop duplicates and stale ones). */
  delivered: Map<string, AliasRedirected>;
  /** The state in the bucket when the subscription started: the subscriber is assumed to have read it. */
  baseline: Map<string, AliasRedirected>;
}

const ACTIONS = { owner: 'owner', terminate: 'terminate' } as const;

/**
 * The cluster backplane over NATS. An owner answers on subjects specific to its transfer, so a query for a
 * transfer nobody runs fails at once with "no responders" (→ `nobody`), a slow owner is waited for up to the
 * caller's timeout, and when NATS itself cannot be reached the answer is `unknown`, never `nobody`.
 * Subscriptions and responders survive NATS restarts (the client re-subscribes on reconnect).
 */
/** The `unknown` answer of a failed request (keeping `silent` when the owner merely did not answer in time). */
function unknownOf(failure: { reason: string; silent?: boolean }): UnknownAnswer {
  return { status: 'unknown', reason: failure.reason, ...(failure.silent ? { silent: true } : {}) };
}

export class NatsBackplane implements Backplane {
  readonly nodeId: string;
  readonly subjects: Subjects;
  readonly #nc: NatsConnection;
  readonly #logger: Logger;
  readonly #registry = new LocalRegistry();
  readonly #status: StatusTracker;
  readonly #backoff: Backoff;
  readonly #aliases: AliasStore;
  readonly #eventSubs = new Set<EventSubscription>();
  readonly #maxBytes: number;
  readonly #timeoutMs: number;
  readonly #settleMs: number;
  #lastReconnectAt = Number.NEGATIVE_INFINITY;
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
    this.#backoff = options.backoff;
    this.#settleMs = options.settleMs;
    this.#maxBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.#timeoutMs = options.operationTimeoutMs ?? 5_000;
    this.#status = new StatusTracker('connected', this.#logger);
    this.#aliases = new AliasStore(nc, {
      bucket: options.bucket,
      logger: this.#logger,
      maxBytes: this.#maxBytes,
      timeoutMs: this.#timeoutMs,
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
            this.#logger.warn({ server: s.server }, 'backplane lost its NATS connection; reconnecting');
            this.#status.set('reconnecting');
            break;
          case 'reconnecting':
            this.#backoff.failure();
            this.#status.set('reconnecting');
            break;
          case 'reconnect':
            this.#backoff.reset();
            this.#lastReconnectAt = Date.now();
            this.#logger.info({ server: s.server }, 'backplane reconnected to NATS');
            this.#status.set('connected');
            void this.#replayAliasState();
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

  #connected(): boolean {
    return this.#status.get() === 'connected' && !this.#nc.isClosed() && !this.#nc.isDraining();
  }

  /** Waits until the server has processed everything sent so far, at most the operation timeout. */
  async #flush(): Promise<boolean> {
    if (!this.#connected()) return false;
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        this.#nc.flush().then(() => true),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), this.#timeoutMs);
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
          else this.#onTransferMessage(id, msg);
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

  #respond(msg: Msg, body: unknown): void {
    const json = JSON.stringify(body);
    try {
      if (Buffer.byteLength(json) > this.#maxBytes) {
        msg.respond(JSON.stringify({ ok: false, error: `reply exceeds ${this.#maxBytes} bytes` }));
      } else {
        msg.respond(json);
      }
    } catch (err) {
      this.#logger.warn({ err, subject: msg.subject }, 'could not answer a backplane request');
    }
  }

  #onTransferMessage(transferId: string, msg: Msg): void {
    const action = Subjects.lastToken(msg.subject);
    if (!msg.reply) {
      logDropped(this.#logger, msg.subject, 'request without a reply subject', msg.data);
      return;
    }
    // A registration being closed stays silent instead of answering "not here": another node may own it now.
    if (!this.#registry.has(transferId)) return;
    if (action === ACTIONS.owner) {
      try {
        this.#respond(msg, { ok: true, owner: this.#registry.report(transferId) });
      } catch (err) {
        this.#logger.error({ err, transferId }, 'responder produced an invalid owner report');
        this.#respond(msg, { ok: false, error: 'the owner produced an invalid report' });
      }
      return;
    }
    if (action === ACTIONS.terminate) {
      this.#registry.terminate(transferId).then(
        (stopped) => {
          if (stopped) this.#respond(msg, { ok: true, terminated: true, by: this.nodeId });
        },
        (err: unknown) => {
          this.#logger.error({ err, transferId }, 'terminating a transfer failed');
          this.#respond(msg, { ok: false, error: `the owner failed to stop: ${(err as Error).message}` });
        },
      );
      return;
    }
    logDropped(this.#logger, msg.subject, `unknown action "${action}"`, msg.data);
  }

  /**
   * Classifies a failed request: only "no responders" on a settled connection is a certain "nobody". A timeout
   * while connected and settled is `silent` (someone is subscribed but did not answer: a hung owner).
   */
  #failure(
    err: unknown,
    timeoutMs: number,
  ): { nobody: true } | { nobody: false; reason: string; silent?: boolean } {
    if (err instanceof RequestError && err.isNoResponders()) {
      const sinceReconnect = Date.now() - this.#lastReconnectAt;
      if (sinceReconnect < this.#settleMs) {
        return {
          nobody: false,
          reason: `no responders, but NATS reconnected ${sinceReconnect} ms ago and owners may not be back yet`,
        };
      }
      return { nobody: true };
    }
    if (err instanceof Error && err.name === 'TimeoutError') {
      const settled = Date.now() - this.#lastReconnectAt >= this.#settleMs;
      return {
        nobody: false,
        reason: `the owner did not answer within ${timeoutMs} ms`,
        ...(this.#connected() && settled ? { silent: true } : {}),
      };
    }
    return { nobody: false, reason: `NATS request failed: ${(err as Error)?.message ?? String(err)}` };
  }

  async whoRuns(transferId: string, options: WhoRunsOptions): Promise<OwnerAnswer> {
    const id = checkTransferId(transferId);
    const timeoutMs = checkTimeout(options.timeoutMs);
    try {
      const local = this.#registry.report(id);
      if (local) return { status: 'owner', owner: local };
    } catch (err) {
      this.#logger.error({ err, transferId: id }, 'local responder produced an invalid report');
      return { status: 'unknown', reason: 'the owner produced an invalid report' };
    }
    if (!this.#connected()) return { status: 'unknown', reason: `NATS is ${this.#status.get()}` };
    let msg: Msg;
    try {
      msg = await this.#nc.request(this.subjects.owner(id), Empty, { timeout: timeoutMs });
    } catch (err) {
      const failure = this.#failure(err, timeoutMs);
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
    if (this.#registry.has(id)) {
      try {
        if (await this.#registry.terminate(id)) return { status: 'terminated', by: this.nodeId };
      } catch (err) {
        return { status: 'unknown', reason: `the owner failed to stop: ${(err as Error).message}` };
      }
    }
    if (!this.#connected()) return { status: 'unknown', reason: `NATS is ${this.#status.get()}` };
    let msg: Msg;
    try {
      msg = await this.#nc.request(this.subjects.terminate(id), Empty, { timeout: timeoutMs });
    } catch (err) {
      const failure = this.#failure(err, timeoutMs);
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
      this.#nc.publish(this.subjects.event(valid.type), json);
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
    const types = checkSubscribeTypes(options);
    const delivery = new OrderedDelivery(handler, types, this.#logger);
    const state: EventSubscription = {
      delivery,
      sub: undefined as unknown as Subscription,
      delivered: new Map(),
      baseline: new Map(),
    };
    try {
      state.sub = this.#nc.subscribe(this.subjects.eventWildcard(), {
        callback: (err, msg) => {
          if (err) this.#logger.warn({ err }, 'event subscription error');
          else this.#onEvent(state, msg);
        },
      });
    } catch (err) {
      throw new BackplaneUnavailableError('Cannot subscribe to events on NATS', { cause: err });
    }
    this.#eventSubs.add(state);
    await this.#flush();
    if (delivery.wants('AliasRedirected') && this.#connected()) {
      try {
        for (const event of await this.#aliases.list()) state.baseline.set(event.alias, event);
      } catch (err) {
        this.#logger.debug({ err }, 'could not read the alias bucket when subscribing');
      }
    }
    let closed = false;
    const close = async () => {
      if (closed) return;
      closed = true;
      this.#eventSubs.delete(state);
      try {
        if (this.#connected()) await state.sub.drain();
        else state.sub.unsubscribe();
      } catch {
        // The connection is already gone.
      }
      await delivery.idle();
    };
    return { close, [Symbol.asyncDispose]: close };
  }

  #onEvent(state: EventSubscription, msg: Msg): void {
    const decoded = decodeJson(msg.data, SluiceEventSchema, this.#maxBytes);
    if (!decoded.ok) {
      logDropped(this.#logger, msg.subject, decoded.reason, msg.data);
      return;
    }
    const event = decoded.value;
    if (Subjects.lastToken(msg.subject) !== event.type) {
      logDropped(this.#logger, msg.subject, `event of type ${event.type} on the wrong subject`, msg.data);
      return;
    }
    this.#offer(state, event, false);
  }

  /** Hands `event` to a subscriber unless it is a duplicate or an older redirect than one it already has. */
  #offer(state: EventSubscription, event: SluiceEvent, replay: boolean): void {
    if (!state.delivery.wants(event.type)) return;
    if (event.type === 'AliasRedirected') {
      const last = state.delivered.get(event.alias);
      if (last && (aliasEventKey(last) === aliasEventKey(event) || isOlderAliasEvent(event, last))) return;
      const base = state.baseline.get(event.alias);
      if (base && isOlderAliasEvent(event, base)) return;
      if (replay && base && aliasEventKey(base) === aliasEventKey(event)) return;
      state.delivered.set(event.alias, event);
    }
    state.delivery.deliver(event);
  }

  /** After a reconnect, hands subscribers the redirects published while they could not hear them. */
  async #replayAliasState(): Promise<void> {
    const interested = [...this.#eventSubs].filter((s) => s.delivery.wants('AliasRedirected'));
    if (interested.length === 0) return;
    try {
      const latest = await this.#aliases.list();
      for (const state of interested) {
        if (!this.#eventSubs.has(state)) continue;
        for (const event of latest) this.#offer(state, event, true);
      }
    } catch (err) {
      this.#logger.warn({ err }, 'could not read the alias bucket after reconnecting');
    }
  }

  async latestAliasEvents(): Promise<SluiceEvent[]> {
    this.#assertOpen();
    if (!this.#connected()) {
      throw new BackplaneUnavailableError(`Cannot read the alias state: NATS is ${this.#status.get()}`);
    }
    try {
      return await this.#aliases.list();
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
    this.#eventSubs.clear();
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
  if (
    typeof options.clusterName !== 'string' ||
    options.clusterName.length === 0 ||
    options.clusterName.length > 128
  ) {
    throw new ConfigError('clusterName must be 1 to 128 characters', [
      { path: 'clusterName', message: 'invalid' },
    ]);
  }
  if (typeof options.nodeId !== 'string' || options.nodeId.length === 0 || options.nodeId.length > 256) {
    throw new ConfigError('nodeId must be 1 to 256 characters', [{ path: 'nodeId', message: 'invalid' }]);
  }
  const bucket = options.kvBucket ?? defaultKvBucket(options.clusterName);
  if (!isValidBucketName(bucket)) {
    throw new ConfigError(`kvBucket "${bucket}" may contain only letters, digits, "-" and "_"`, [
      { path: 'kvBucket', message: 'invalid bucket name' },
    ]);
  }
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
