import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { connect, Empty, RequestError, TimeoutError } from '@nats-io/transport-node';
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
import { aliasEventKey, aliasSlot, isOlderAliasEvent } from '../shared/alias-latest.js';
import { OrderedDelivery } from '../shared/delivery.js';
import { checkSubscribeTypes } from '../shared/local-events.js';
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
  /** JetStream KV bucket for the latest `AliasRedirected` per host and alias (default `sluice-aliases-<cluster>`). */
  kvBucket?: string;
  /**
   * Hear and list only this host's alias events (an api-server passes its host's `node.id`): alias versions are
   * per host, so another host's events are never delivered, compared or even received (its subjects are not
   * subscribed). Default: every host's.
   */
  aliasHost?: string;
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
  subs: Subscription[];
  /** The last redirect handed to this subscriber per host and alias (to drop duplicates and stale ones). */
  delivered: Map<string, AliasRedirected>;
  /** The state in the bucket when the subscription started: the subscriber is assumed to have read it. */
  baseline: Map<string, AliasRedirected>;
}

const ACTIONS = { owner: 'owner', terminate: 'terminate' } as const;

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
  readonly #eventSubs = new Set<EventSubscription>();
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
            void this.#replayAliasState();
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
    const types = checkSubscribeTypes(options);
    const delivery = new OrderedDelivery(handler, types, this.#logger);
    const state: EventSubscription = { delivery, subs: [], delivered: new Map(), baseline: new Map() };
    // With an alias host, that host's alias subject plus the other event types; otherwise everything.
    const subjects =
      this.#aliasHost === undefined
        ? [this.subjects.eventWildcard()]
        : [this.subjects.typeWildcard(), this.subjects.aliasEvents(this.#aliasHost)];
    try {
      for (const subject of subjects) {
        state.subs.push(
          this.#nc.subscribe(subject, {
            callback: (err, msg) => {
              if (err) this.#logger.warn({ err }, 'event subscription error');
              else this.#onEvent(state, msg);
            },
          }),
        );
      }
    } catch (err) {
      for (const sub of state.subs) sub.unsubscribe();
      throw new BackplaneUnavailableError('Cannot subscribe to events on NATS', { cause: err });
    }
    this.#eventSubs.add(state);
    await this.#flush();
    if (delivery.wants('AliasRedirected') && this.#connected()) {
      try {
        for (const event of await this.#aliases.list(this.#aliasHost))
          state.baseline.set(aliasSlot(event), event);
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
        if (this.#connected()) await Promise.all(state.subs.map((sub) => sub.drain()));
        else for (const sub of state.subs) sub.unsubscribe();
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
    if (msg.subject !== this.subjects.eventOf(event)) {
      logDropped(this.#logger, msg.subject, `event of type ${event.type} on the wrong subject`, msg.data);
      return;
    }
    this.#offer(state, event, false);
  }

  /** Hands `event` to a subscriber unless it is a duplicate or an older redirect than one it already has. */
  #offer(state: EventSubscription, event: SluiceEvent, replay: boolean): void {
    if (!state.delivery.wants(event.type)) return;
    if (event.type === 'AliasRedirected') {
      if (this.#aliasHost !== undefined && event.host !== this.#aliasHost) return;
      // Versions count per host: compare only with what this subscriber has of the same host's alias.
      const slot = aliasSlot(event);
      const last = state.delivered.get(slot);
      if (last && (aliasEventKey(last) === aliasEventKey(event) || isOlderAliasEvent(event, last))) return;
      const base = state.baseline.get(slot);
      if (base && isOlderAliasEvent(event, base)) return;
      if (replay && base && aliasEventKey(base) === aliasEventKey(event)) return;
      state.delivered.set(slot, event);
    }
    state.delivery.deliver(event);
  }

  /** After a reconnect, hands subscribers the redirects published while they could not hear them. */
  async #replayAliasState(): Promise<void> {
    const interested = [...this.#eventSubs].filter((s) => s.delivery.wants('AliasRedirected'));
    if (interested.length === 0) return;
    try {
      const latest = await this.#aliases.list(this.#aliasHost);
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
  if (
    options.aliasHost !== undefined &&
    (typeof options.aliasHost !== 'string' ||
      options.aliasHost.length === 0 ||
      options.aliasHost.length > 512)
  ) {
    throw new ConfigError('aliasHost must be 1 to 512 characters', [
      { path: 'aliasHost', message: 'invalid' },
    ]);
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
