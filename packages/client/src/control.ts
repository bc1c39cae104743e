import type {
  EndpointStatus,
  EndpointStreamEvent,
  EndpointWatchView,
  GenerationsView,
  NodeView,
  SwitchOutcome,
} from '@sluice/core';
import { disposable } from './disposable.js';
import { ClientErrorCode, SluiceClientError } from './errors.js';
import { type ConnectionLoss, DEFAULT_IDLE_TIMEOUT_MS, openEventStream } from './event-stream.js';
import { type HttpTarget, requestJson } from './http.js';

export interface WatchOptions {
  /** Stops the iterator (it also stops when the loop breaks). */
  signal?: AbortSignal | undefined;
  /** Reconnect backoff (default 250 ms doubling to 10 s, jittered). */
  backoff?: { initialMs?: number | undefined; maxMs?: number | undefined } | undefined;
  /** Heartbeat interval the server is asked for (1 000–60 000 ms; the server's default is 15 000). */
  heartbeatMs?: number | undefined;
  /**
   * Reconnect when the connection delivers nothing, not even a heartbeat, for this long (default three heartbeats:
   * 3 × `heartbeatMs`, or 45 000 ms; 0 = never).
   */
  idleTimeoutMs?: number | undefined;
  /** Called after each (re)connection is accepted, before its first event (e.g. to show "live"). */
  onOpen?: (() => void) | undefined;
  /**
   * Called when a connection attempt fails or the open connection is lost (`unreachable`, `refused`, `closed`);
   * the stream reconnects by itself and `onOpen` says when it is up again — so a page can show "not live" between.
   * A refused connection comes with the server's refusal (`429 QUEUE_FULL` names the bound reached), to say why.
   */
  onConnectionLost?: ((why: ConnectionLoss, refusal?: SluiceClientError) => void) | undefined;
}

/**
 * Least deadline of a promote or rollback (ms): the server may hold one for the endpoint's `switch.handoverWaitMs`
 * (at most 300 s) before it switches or answers `504 ENDPOINT_TIMEOUT`, so the client's general `timeoutMs` (30 s by
 * default) would abandon a switch the server goes on to make.
 */
export const STEERING_TIMEOUT_MS = 310_000;

const path = (name: string, suffix: string) => `/v1/endpoints/${encodeURIComponent(name)}${suffix}`;

/**
 * The endpoints and members of an app-server's control API: status, generations and alias history, rebuild,
 * promote, rollback, the live endpoint stream, and the cluster's nodes.
 *
 * @example
 * ```ts
 * const control = createClient({ controlUrl: 'http://127.0.0.1:7070', token }).control;
 * await control.rebuild('cities');
 * for await (const event of control.watchEndpoints()) if (event.type === 'switch') console.log(event.to);
 * ```
 */
export class ControlClient {
  constructor(private readonly target: HttpTarget) {}

  /** The endpoints of the app-server's host (`GET /v1/endpoints`). */
  async endpoints(options: { signal?: AbortSignal | undefined } = {}): Promise<EndpointStatus[]> {
    const { body } = await requestJson<{ endpoints: EndpointStatus[] }>(
      this.target,
      'GET',
      '/v1/endpoints',
      undefined,
      {},
      options.signal,
    );
    return body.endpoints;
  }

  /** Retained generations (newest first) and the alias history of one endpoint. */
  async generations(
    name: string,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<GenerationsView> {
    const { body } = await requestJson<GenerationsView>(
      this.target,
      'GET',
      path(name, '/generations'),
      undefined,
      {},
      options.signal,
    );
    return body;
  }

  /** Starts a blue/green rebuild: a new generation is built while the current one serves, then the alias moves. */
  async rebuild(
    name: string,
    options: { signal?: AbortSignal | undefined } = {},
  ): Promise<{ endpoint: string; rebuild: string }> {
    const { body } = await requestJson<{ endpoint: string; rebuild: string }>(
      this.target,
      'POST',
      path(name, '/rebuild'),
      undefined,
      {},
      options.signal,
    );
    return body;
  }

  /**
   * Switches the alias to the held generation (`NOTHING_TO_PROMOTE` when none is held). With `generation` — the one
   * you saw held — only that one: if another was held since (a second rebuild), or it is held no more, the server
   * answers `GENERATION_NOT_HELD` and nothing moves.
   *
   * @example
   * ```ts
   * const [items] = await client.control.endpoints();
   * if (items?.held) await client.control.promote('items', { generation: items.held.cache });
   * ```
   */
  async promote(
    name: string,
    options: {
      generation?: string | undefined;
      signal?: AbortSignal | undefined;
      timeoutMs?: number | undefined;
    } = {},
  ): Promise<SwitchOutcome> {
    const { body } = await requestJson<SwitchOutcome>(
      this.target,
      'POST',
      path(name, '/promote'),
      options.generation === undefined ? undefined : { generation: options.generation },
      {},
      options.signal,
      this.#steeringTimeout(options.timeoutMs),
    );
    return body;
  }

  /**
   * The deadline of a promote or rollback: `timeoutMs` when given, else the client's, but never below
   * {@link STEERING_TIMEOUT_MS} — the server itself answers within the endpoint's `switch.handoverWaitMs`.
   */
  #steeringTimeout(timeoutMs: number | undefined): number {
    if (timeoutMs !== undefined) return timeoutMs;
    const own = this.target.timeoutMs;
    return own === 0 ? 0 : Math.max(own, STEERING_TIMEOUT_MS);
  }

  /**
   * Points the alias back at the generation that served before (or `to`), continuing it from its checkpoint;
   * `CANNOT_RESUME` (nothing changed) when its source cannot resume there, `NOTHING_TO_ROLL_BACK` when none is
   * retained. With `from` — the generation you saw serving — only from that one: if another serves since (a rebuild
   * switched, another operator promoted or rolled back), the server answers `GENERATION_NOT_SERVING` and nothing
   * moves.
   *
   * @example
   * ```ts
   * const { history } = await client.control.generations('items');
   * const [latest] = history;
   * if (latest?.from) await client.control.rollback('items', { to: latest.from, from: latest.to });
   * ```
   */
  async rollback(
    name: string,
    options: {
      to?: string | undefined;
      from?: string | undefined;
      signal?: AbortSignal | undefined;
      timeoutMs?: number | undefined;
    } = {},
  ): Promise<SwitchOutcome> {
    const body =
      options.to === undefined && options.from === undefined
        ? undefined
        : {
            ...(options.to === undefined ? {} : { to: options.to }),
            ...(options.from === undefined ? {} : { from: options.from }),
          };
    const reply = await requestJson<SwitchOutcome>(
      this.target,
      'POST',
      path(name, '/rollback'),
      body,
      {},
      options.signal,
      this.#steeringTimeout(options.timeoutMs),
    );
    return reply.body;
  }

  /** The members that share the store, alive or not (`GET /v1/nodes`). */
  async nodes(options: { signal?: AbortSignal | undefined } = {}): Promise<NodeView[]> {
    const { body } = await requestJson<{ nodes: NodeView[] }>(
      this.target,
      'GET',
      '/v1/nodes',
      undefined,
      {},
      options.signal,
    );
    return body.nodes;
  }

  /**
   * The live endpoint stream (`GET /v1/endpoints/stream`): an `endpoints` event with the whole picture on every
   * (re)connection and on every change, a `switch` event per alias switch. Reconnects on its own after a dropped
   * connection, `429` or `5xx`; refusals retrying cannot fix (auth, bad parameters) end it with a
   * `SluiceClientError`. Ending it (`break`, `return()`, the `signal`, an `await using` block's end) closes it.
   */
  watchEndpoints(options: WatchOptions = {}): AsyncGenerator<EndpointStreamEvent> {
    const query = options.heartbeatMs === undefined ? '' : `?heartbeatMs=${options.heartbeatMs}`;
    return disposable(
      openEventStream<EndpointStreamEvent>(this.target, {
        what: 'The endpoint stream',
        ...(options.signal ? { signal: options.signal } : {}),
        ...(options.backoff ? { backoff: options.backoff } : {}),
        ...(options.onOpen ? { onOpen: options.onOpen } : {}),
        ...(options.onConnectionLost ? { onConnectionLost: options.onConnectionLost } : {}),
        idleTimeoutMs:
          options.idleTimeoutMs ??
          (options.heartbeatMs === undefined ? DEFAULT_IDLE_TIMEOUT_MS : 3 * options.heartbeatMs),
        path: () => `/v1/endpoints/stream${query}`,
        decode: (message) => toStreamEvent(message.event, message.data),
        endOnBadEvent: true,
      }),
    );
  }
}

function toStreamEvent(type: string, data: string): EndpointStreamEvent | null {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(data) as Record<string, unknown>;
  } catch {
    throw new SluiceClientError(ClientErrorCode.BAD_RESPONSE, `Endpoint stream event "${type}" is not JSON`);
  }
  switch (type) {
    case 'endpoints':
      return { type, endpoints: body.endpoints as EndpointWatchView[] };
    case 'switch':
      return {
        type,
        endpoint: String(body.endpoint),
        from: (body.from ?? null) as string | null,
        to: String(body.to),
        cause: (body.cause ?? null) as string | null,
        version: (body.version ?? null) as number | null,
        at: String(body.at),
      };
    default:
      return null; // an event type this client does not know: skip it
  }
}
