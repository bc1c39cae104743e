import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { connect, Empty, RequestError } from '@nats-io/transport-node';
import type {
  AliasRedirected,
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
import type { z } from 'zod';
import { type LocalSide, localOwner, localTerminate } from '../shared/local-first.js';
import { LocalRegistry } from '../shared/local-registry.js';
import {
  checkEvent,
  checkTimeout,
  checkTransferId,
  DEFAULT_MAX_MESSAGE_BYTES,
  decodeJson,
  InstanceOwnerReplySchema,
  InstanceTerminateReplySchema,
  logDropped,
  OwnerReplySchema,
  TerminateReplySchema,
} from '../shared/wire.js';
import { within } from '../shared/within.js';
import { AliasOutbox } from './alias-outbox.js';
import { AliasStore } from './alias-store.js';
import { checkNatsBackplaneOptions, type NatsBackplaneOptions } from './backplane-options.js';
import { ConnectionHealth } from './connection-health.js';
import {
  Backoff,
  DEFAULT_RECONNECT,
  natsConnectionOptions,
  type ReconnectPolicy,
} from './connection-options.js';
import { NatsEventFanout } from './event-fanout.js';
import { answerInstanceRequest, answerTransferRequest, type OwnerSide } from './owner-side.js';
import { classifyFailure, type SecondAsk, unknownOf } from './request-failure.js';
import { Subjects } from './subjects.js';

/** A reply schema of the owner side: a positive reply, or `{ ok: false, error }`. */
type ReplySchema = z.ZodType<{ ok: true } | { ok: false; error: string }>;

/**
 * `whoRuns`/`terminate` options as the NATS backplane reads them (core's `WhoRunsOptions`: with `ownerInstance`,
 * a backplane created with `instanceId` asks that instance's subject). Kept as a name for existing imports.
 */
export type OwnerQueryOptions = WhoRunsOptions;

const encoder = new TextEncoder();

/** Retries of kept alias redirects while NATS is connected but refuses them (e.g. JetStream not ready yet). */
const ALIAS_RETRY = { initialDelayMs: 100, maxDelayMs: 5_000 };

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
  readonly #health: ConnectionHealth;
  readonly #aliases: AliasStore;
  readonly #events: NatsEventFanout;
  /** Alias redirects not published yet (NATS down, or the alias state not stored), latest per alias. */
  readonly #outbox: AliasOutbox;
  readonly #ownerSide: OwnerSide;
  readonly #maxBytes: number;
  readonly #timeoutMs: number;
  readonly #aliasHost: string | undefined;
  /** Set: this process answers for all its transfers on its instance's subject (one subscription). */
  readonly #instanceId: string | undefined;
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
    this.#aliasHost = options.aliasHost;
    this.#maxBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.#timeoutMs = options.operationTimeoutMs ?? 5_000;
    this.#health = new ConnectionHealth(nc, {
      logger: this.#logger,
      backoff: options.backoff,
      settleMs: options.settleMs,
      timeoutMs: this.#timeoutMs,
    });
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
      connected: () => this.#health.connected(),
      flush: () => this.#health.flush(),
      timeoutMs: this.#timeoutMs,
    });
    this.#outbox = new AliasOutbox({
      send: (event) => this.#sendRedirect(event),
      connected: () => this.#health.connected(),
      logger: this.#logger,
      retry: ALIAS_RETRY,
    });
    this.#instanceId = options.instanceId;
    if (this.#instanceId !== undefined) {
      nc.subscribe(this.subjects.instanceWildcard(this.#instanceId), {
        callback: (err, msg) => {
          if (err) this.#logger.warn({ err }, 'instance subscription error');
          else answerInstanceRequest(this.#ownerSide, msg);
        },
      });
    }
    this.#statusLoop = this.#health.watch({
      reconnected: () => {
        if (this.#outbox.size > 0)
          this.#logger.info(
            { kept: this.#outbox.size },
            'publishing the alias redirects kept while NATS was unreachable',
          );
        void this.#outbox.flush();
        void this.#events.replayAliasState();
      },
      closing: () => this.#closing !== null,
    });
  }

  /** @internal Whether the server has processed everything sent so far (within the operation timeout). */
  confirmSent(): Promise<boolean> {
    return this.#health.flush();
  }

  /** The JetStream KV bucket holding the latest redirect per alias. */
  get kvBucket(): string {
    return this.#aliases.bucket;
  }

  #assertOpen(): void {
    if (this.#closing || this.#nc.isClosed()) throw new BackplaneUnavailableError('The backplane is closed');
  }

  /**
   * Answers for `transferId` from now on. With `instanceId` that is the local registry alone — the instance's
   * subscription, known to the server since connect, answers for every transfer in it — so a claim costs no NATS
   * round trip; otherwise a subscription of the transfer's own subjects, flushed before this resolves.
   */
  async serve(transferId: string, responder: TransferResponder): Promise<Registration> {
    this.#assertOpen();
    const id = checkTransferId(transferId);
    const remove = this.#registry.add(id, responder);
    if (this.#instanceId !== undefined) {
      const close = async () => remove();
      return { close, [Symbol.asyncDispose]: close };
    }
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
    if (!(await this.#health.flush())) {
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
      await this.#health.flush();
    };
    return { close, [Symbol.asyncDispose]: close };
  }

  async whoRuns(transferId: string, options: OwnerQueryOptions): Promise<OwnerAnswer> {
    const id = checkTransferId(transferId);
    const timeoutMs = checkTimeout(options.timeoutMs);
    const local = localOwner(this.#local, id);
    if (local) return local;
    const target = this.#ownerTarget(id, options, 'owner');
    if (!('subject' in target)) return target;
    const reply = target.instance
      ? await this.#ask(target.subject, timeoutMs, InstanceOwnerReplySchema, 'owner', id)
      : await this.#ask(target.subject, timeoutMs, OwnerReplySchema, 'owner');
    if (reply === 'nobody' || 'running' in reply) return { status: 'nobody' };
    if ('status' in reply) return reply;
    return { status: 'owner', owner: reply.owner };
  }

  async terminate(transferId: string, options: OwnerQueryOptions): Promise<TerminateAnswer> {
    const id = checkTransferId(transferId);
    const timeoutMs = checkTimeout(options.timeoutMs);
    const local = await localTerminate(this.#local, id);
    if (local) return local;
    const target = this.#ownerTarget(id, options, 'terminate');
    if (!('subject' in target)) return target;
    const reply = target.instance
      ? await this.#ask(target.subject, timeoutMs, InstanceTerminateReplySchema, 'terminate', id)
      : await this.#ask(target.subject, timeoutMs, TerminateReplySchema, 'terminate');
    if (reply === 'nobody' || 'running' in reply) return { status: 'not-running' };
    if ('status' in reply) return reply;
    return { status: 'terminated', by: reply.by };
  }

  /**
   * Where `action` about transfer `id` is asked: the transfer's own subject, or in instance mode the subject of
   * the instance the caller's record names (the id then travels in the body).
   */
  #ownerTarget(
    id: string,
    options: OwnerQueryOptions,
    action: 'owner' | 'terminate',
  ): { subject: string; instance: boolean } | UnknownAnswer {
    if (this.#instanceId === undefined)
      return {
        subject: action === 'owner' ? this.subjects.owner(id) : this.subjects.terminate(id),
        instance: false,
      };
    const instance = this.#ownerInstance(options);
    if (typeof instance !== 'string') return instance;
    return { subject: this.subjects.instance(instance, action), instance: true };
  }

  /**
   * The instance to ask, in instance mode. Without one the answer is `unknown`, never `nobody`: owners of this
   * cluster answer on their instance's subject only, so a transfer subject would say "no responders" even while
   * one runs it.
   */
  #ownerInstance(options: OwnerQueryOptions): string | UnknownAnswer {
    const instance = options.ownerInstance;
    if (typeof instance === 'string' && instance.length > 0 && instance.length <= 200) return instance;
    return { status: 'unknown', reason: 'the owner instance is not known (instance-mode backplane)' };
  }

  /**
   * Asks a transfer's owner over NATS (this process's own registry had no answer): `nobody` when NATS says for
   * certain that no one serves it (request-failure.ts), an `unknown` answer when the connection, the request or
   * the reply leaves it open, else the owner's positive reply.
   */
  async #ask<S extends ReplySchema>(
    subject: string,
    timeoutMs: number,
    schema: S,
    what: string,
    /** The transfer asked about, for an instance's subject (a transfer subject names it itself). */
    transferId?: string,
  ): Promise<'nobody' | UnknownAnswer | Extract<z.output<S>, { ok: true }>> {
    if (!this.#health.connected()) return { status: 'unknown', reason: `NATS is ${this.#health.status()}` };
    const settled = this.#health.settled();
    const body = transferId === undefined ? Empty : encoder.encode(JSON.stringify({ id: transferId }));
    let msg: Msg;
    try {
      msg = await this.#nc.request(subject, body, { timeout: timeoutMs });
    } catch (err) {
      const askAgain = async (ms: number): Promise<SecondAsk> => {
        try {
          await this.#nc.request(subject, body, { timeout: ms });
          return 'answered';
        } catch (again) {
          return again instanceof RequestError && again.isNoResponders() ? 'no-responders' : 'no-answer';
        }
      };
      const failure = await classifyFailure(this.#health, err, timeoutMs, settled, askAgain);
      return failure.nobody ? 'nobody' : unknownOf(failure);
    }
    const reply = decodeJson(msg.data, schema, this.#maxBytes);
    if (!reply.ok) {
      logDropped(this.#logger, msg.subject, reply.reason, msg.data);
      return { status: 'unknown', reason: `malformed ${what} reply (${reply.reason})` };
    }
    const value: { ok: true } | { ok: false; error: string } = reply.value;
    if (!value.ok) return { status: 'unknown', reason: value.error };
    return value as Extract<z.output<S>, { ok: true }>;
  }

  /**
   * Publishes `event`. An `AliasRedirected` that cannot reach NATS now (disconnected or reconnecting, or its alias
   * state could not be stored) is kept — the latest per host and alias — and published once NATS is back, in
   * order; the call then rejects at once with `BACKPLANE_UNAVAILABLE` and `details.deferred: true` (nothing waits
   * for the reconnect). Other events describe moments and are not kept.
   */
  async publish(event: SluiceEvent): Promise<void> {
    this.#assertOpen();
    const valid = checkEvent(event);
    const json = JSON.stringify(valid);
    if (Buffer.byteLength(json) > this.#maxBytes) throw new PayloadTooLargeError(this.#maxBytes);
    if (valid.type === 'AliasRedirected') return this.#publishRedirect(valid);
    if (!this.#health.connected()) {
      throw new BackplaneUnavailableError(`Cannot publish ${valid.type}: NATS is ${this.#health.status()}`);
    }
    try {
      this.#nc.publish(this.subjects.eventOf(valid), json);
    } catch (err) {
      throw new BackplaneUnavailableError(`Cannot publish ${valid.type}`, { cause: err });
    }
    if (!(await this.#health.flush())) {
      throw new BackplaneUnavailableError(`Cannot confirm that ${valid.type} reached NATS`);
    }
  }

  /**
   * Through the outbox, behind any redirect kept before it (so one alias's redirects reach NATS in order);
   * resolves once this one (or a newer one of its alias) is published and stored.
   */
  async #publishRedirect(event: AliasRedirected): Promise<void> {
    this.#outbox.keep(event);
    await this.#outbox.flush();
    if (!this.#outbox.holds(event)) return;
    const why = this.#health.connected()
      ? `its alias state could not be stored in KV bucket ${this.kvBucket}`
      : `NATS is ${this.#health.status()}`;
    throw new BackplaneUnavailableError(
      `Cannot publish AliasRedirected for "${event.alias}" now (${why}); kept, and published once NATS takes it`,
      { details: { deferred: true, alias: event.alias, to: event.to }, cause: this.#outbox.lastError },
    );
  }

  /**
   * Publishes one redirect on its host's subject, stores it as its alias's latest state, and publishes it once more
   * (what the outbox sends). The first publish reaches live subscribers even where the bucket cannot be written
   * (NATS without JetStream). The second closes a window: a subscriber whose subscription came back after the first
   * publish but read the bucket before the store landed would otherwise get neither. Every subscriber reads the
   * bucket only after its subscription is back, so it hears the second publish or finds the state stored;
   * subscribers drop the repeat (same alias, same version).
   */
  async #sendRedirect(event: AliasRedirected): Promise<void> {
    if (!this.#health.connected()) {
      throw new BackplaneUnavailableError(`Cannot publish AliasRedirected: NATS is ${this.#health.status()}`);
    }
    const announce = () => {
      try {
        this.#nc.publish(this.subjects.eventOf(event), JSON.stringify(event));
      } catch (err) {
        throw new BackplaneUnavailableError('Cannot publish AliasRedirected', { cause: err });
      }
    };
    announce();
    try {
      await this.#aliases.put(event);
    } catch (err) {
      throw new BackplaneUnavailableError(
        `Published AliasRedirected for "${event.alias}" but could not store it in KV bucket ${this.kvBucket}`,
        { cause: err },
      );
    }
    announce();
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
    if (!this.#health.connected()) {
      throw new BackplaneUnavailableError(`Cannot read the alias state: NATS is ${this.#health.status()}`);
    }
    try {
      return await this.#aliases.list(this.#aliasHost);
    } catch (err) {
      throw new BackplaneUnavailableError(`Cannot read KV bucket ${this.kvBucket}`, { cause: err });
    }
  }

  status(): BackplaneStatus {
    return this.#health.status();
  }

  onStatus(listener: (status: BackplaneStatus) => void): () => void {
    return this.#health.onStatus(listener);
  }

  /** No drop, reconnect or stale connection since `since`, and connected now (the server kept this node's subscriptions). */
  reachableSince(since: number): boolean {
    return this.#health.reachableSince(since);
  }

  /** Drains: in-flight messages are handled and pending publishes flushed, then the connection closes. */
  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  async #shutdown(): Promise<void> {
    await this.#flushKeptRedirects();
    // Responders stay registered while draining, so queries already routed here are still answered.
    if (!this.#nc.isClosed()) {
      try {
        if (this.#health.status() === 'connected') await within(this.#nc.drain(), this.#timeoutMs);
      } catch (err) {
        this.#logger.debug({ err }, 'drain failed; closing');
      }
      if (!this.#nc.isClosed()) await this.#nc.close().catch(() => undefined);
    }
    this.#registry.clear();
    this.#events.clear();
    await this.#statusLoop;
    this.#health.markClosed();
  }

  /**
   * On close: one last try (within the operation timeout) to publish the redirects still kept; what remains is
   * lost with this process and said so (api-servers still reconcile from the alias table).
   */
  async #flushKeptRedirects(): Promise<void> {
    if (this.#outbox.size > 0 && this.#health.connected())
      await within(this.#outbox.flush(), this.#timeoutMs);
    const dropped = this.#outbox.close();
    if (dropped.length > 0)
      this.#logger.warn(
        { redirects: dropped.map((e) => ({ host: e.host, alias: e.alias, to: e.to })) },
        'closing with alias redirects never published to NATS; readers catch up from the alias table',
      );
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/**
 * Connects to NATS and returns the cluster backplane. The first connection must succeed — retried for up to
 * `connectWaitMs` while the server cannot be reached; bad credentials, or an unreachable server past that, fail
 * here with `BACKPLANE_UNAVAILABLE` —; after that it reconnects forever with backoff.
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
  const nc = await firstConnection(connectionOptions, options);
  const settleMs = options.reconnectSettleMs ?? 2 * policy.maxDelayMs + 500;
  const backplane = new NatsBackplane(nc, { ...options, backoff, settleMs, bucket });
  // The instance's subscription must be known to the server before the first serve() resolves (a claim's record
  // then says IN_PROGRESS): serve() no longer flushes in instance mode.
  if (options.instanceId !== undefined && !(await backplane.confirmSent())) {
    await backplane.close();
    throw new BackplaneUnavailableError('NATS did not confirm the instance subscription');
  }
  return backplane;
}

/**
 * Connect failures that waiting may cure: nothing listens (yet), no answer, a name not resolvable (yet), a
 * connection closed before NATS spoke (a proxy or port forward in front of a server not up yet: nats.js says "error
 * connecting").
 */
const UNREACHABLE =
  /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|refused|timeout|error connecting/i;

/**
 * The first connection, retried (1 s apart, each wait logged) for up to `options.connectWaitMs` while NATS cannot be
 * reached; anything else — credentials, TLS, a bad URL — fails at once with `BACKPLANE_UNAVAILABLE`.
 */
async function firstConnection(
  connectionOptions: ReturnType<typeof natsConnectionOptions>,
  options: NatsBackplaneOptions,
): Promise<NatsConnection> {
  const waitMs = options.connectWaitMs ?? 0;
  const deadline = Date.now() + waitMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await connect(connectionOptions);
    } catch (err) {
      if (SluiceError.isInstance(err)) throw err;
      const message = (err as Error).message ?? String(err);
      const left = deadline - Date.now();
      const waitable = UNREACHABLE.test(`${(err as NodeJS.ErrnoException).code ?? ''} ${message}`);
      if (!waitable || left <= 0 || options.signal?.aborted) {
        const waited = waitMs > 0 && attempt > 1 ? ` (tried for ${Math.round(waitMs / 1000)} s)` : '';
        throw new BackplaneUnavailableError(`Cannot connect to NATS: ${message}${waited}`, { cause: err });
      }
      options.logger?.warn(
        { attempt, err: message, waitingMs: left },
        'NATS is not reachable yet; waiting for it (backplane.connectWaitMs)',
      );
      await abortableDelay(Math.min(1_000, left), options.signal);
    }
  }
}

/** Waits `ms`, or less when `signal` aborts meanwhile. */
function abortableDelay(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
