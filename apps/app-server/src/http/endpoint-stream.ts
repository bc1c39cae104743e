import type { ServerResponse } from 'node:http';
import type {
  AliasRedirected,
  EndpointStatus,
  EndpointStreamEvent,
  EndpointWatchView,
  GenerationsView,
  QueueFullError,
} from '@sluice/core';
import { addressClient, atExpiry, StreamAdmission, StreamBound, startEventStream } from '@sluice/http';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { Counter, Gauge, type Registry } from 'prom-client';
import { z } from 'zod';
import { CONTROL_PROBLEMS, EndpointStreamResponse, ProblemSchema } from './control-responses.js';

/** What the stream reads: the host's endpoints (the app-server's `EndpointManager`). */
export interface EndpointSource {
  status(): Promise<EndpointStatus[]>;
  generations(name: string): Promise<GenerationsView>;
}

/** Subscribes to this host's alias switches (AliasRedirected as the pipelines publish it); returns the unsubscribe. */
export type SwitchSubscription = (listener: (event: AliasRedirected) => void) => () => void;

export interface EndpointStreamOptions {
  endpoints: EndpointSource;
  switches: SwitchSubscription;
  /** How often the picture is sampled while someone watches (default 500 ms): progress, records, lag, rate. */
  sampleMs?: number;
  /** Heartbeat comment interval unless the request asks for another (default 15 000 ms). */
  heartbeatMs?: number;
  /** Streams open at once (`control.maxStreams`, default 256); more are refused with 429 QUEUE_FULL. */
  maxStreams?: number;
  /**
   * Streams of one client open at once (`control.maxStreamsPerClient`, default 16); more are refused with 429
   * QUEUE_FULL, so that one client cannot take every slot of `maxStreams`.
   */
  maxStreamsPerClient?: number;
  /**
   * Where `sluice_endpoint_stream_watchers` (streams open now) and `sluice_endpoint_stream_refusals_total` are
   * reported; none when absent.
   */
  metrics?: Registry;
}

/** Seconds a refused watcher is told to wait (`retry-after`): streams close at the pace of their clients. */
const RETRY_AFTER_SECONDS = 5;

/** A watcher that stops reading is cut off once this much is waiting in its socket. */
const MAX_BUFFERED_BYTES = 4 * 1024 * 1024;

/** Sent first: how long a browser's EventSource waits before reconnecting. */
const RETRY_FRAME = 'retry: 1000\n\n';
const HEARTBEAT_FRAME = ': heartbeat\n\n';
/** Sent last when the watcher's bearer token expires: its reconnection with the same token is a 401. */
const TOKEN_EXPIRED_FRAME = ': the bearer token expired; reconnect with a renewed one\n\n';

function frame(event: EndpointStreamEvent): string {
  const { type, ...data } = event;
  return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}

interface Watcher {
  res: ServerResponse;
  /** Whose slot it holds (`ClientSlots`): the bearer token's client, or the remote address without auth. */
  client: string;
  heartbeat: NodeJS.Timeout;
  /** Cancels the end at the token's expiry (a no-op without one). */
  cancelExpiry: () => void;
}

/**
 * The host's endpoints as one picture (status + generations + alias history per endpoint), pushed to every
 * watcher when any of it changes: sampled every `sampleMs` while at least one watcher is connected (one sampling
 * for all of them), and at once after an alias switch, which is also pushed as its own `switch` event. At most
 * `maxStreams` watchers, and `maxStreamsPerClient` of one client: ask {@link EndpointWatchHub.refusal} first.
 *
 * @example
 * ```ts
 * const hub = new EndpointWatchHub({ endpoints, switches: serving.onSwitch }, app.log);
 * const refused = hub.refusal('sub:console');
 * if (refused) throw refused;
 * hub.watch(reply.raw, 15_000, null, 'sub:console');
 * await hub.close();
 * ```
 */
export class EndpointWatchHub {
  readonly #watchers = new Set<Watcher>();
  readonly #endpoints: EndpointSource;
  readonly #sampleMs: number;
  readonly #log: FastifyBaseLogger;
  readonly #unsubscribe: () => void;
  readonly #admission: StreamAdmission;
  readonly #refusals: Counter<'limit'> | null;
  #timer: NodeJS.Timeout | null = null;
  /** The last picture sent (its JSON), so an unchanged sample sends nothing. */
  #last: string | null = null;
  #sampling: Promise<void> | null = null;
  #again = false;
  #closed = false;

  constructor(options: EndpointStreamOptions, log: FastifyBaseLogger) {
    this.#endpoints = options.endpoints;
    this.#sampleMs = options.sampleMs ?? 500;
    this.#log = log;
    this.#refusals = options.metrics
      ? new Counter({
          name: 'sluice_endpoint_stream_refusals_total',
          help: 'Endpoint streams refused 429: the node had control.maxStreams open (limit="server") or the client control.maxStreamsPerClient (limit="client")',
          labelNames: ['limit'],
          registers: [options.metrics],
        })
      : null;
    for (const limit of Object.values(StreamBound)) this.#refusals?.inc({ limit }, 0);
    this.#admission = new StreamAdmission({
      streams: 'endpoint streams',
      process: 'app-server',
      max: { value: options.maxStreams ?? 256, setting: 'control.maxStreams' },
      perClient: { value: options.maxStreamsPerClient ?? 16, setting: 'control.maxStreamsPerClient' },
      retryAfterSeconds: RETRY_AFTER_SECONDS,
      onRefusal: (limit) => this.#refusals?.inc({ limit }),
    });
    this.#unsubscribe = options.switches((event) => this.#onSwitch(event));
  }

  /**
   * Why `client` may open no stream now — the node has `maxStreams` open or is closing, or the client has
   * `maxStreamsPerClient` — as the 429 to answer (counted), or null when it may.
   */
  refusal(client: string): QueueFullError | null {
    return this.#admission.refusal(client, this.#watchers.size, this.#closed);
  }

  get size(): number {
    return this.#watchers.size;
  }

  get isClosed(): boolean {
    return this.#closed;
  }

  /**
   * Starts a watcher on a response whose headers are written: the current picture first, then changes — until
   * `expiresAt` (epoch ms) when its bearer token expires then: a JWT cannot be revoked, so a stream outliving its
   * token would go on showing the host to whoever held it. It holds one of `client`'s slots until it ends.
   */
  async watch(
    res: ServerResponse,
    heartbeatMs: number,
    expiresAt: number | null,
    client: string,
  ): Promise<void> {
    const watcher: Watcher = {
      res,
      client,
      heartbeat: setInterval(() => this.#send(watcher, HEARTBEAT_FRAME), heartbeatMs),
      cancelExpiry:
        expiresAt === null
          ? () => {}
          : atExpiry(expiresAt, () => {
              this.#send(watcher, TOKEN_EXPIRED_FRAME);
              res.end();
              this.#drop(watcher);
            }),
    };
    this.#watchers.add(watcher);
    this.#admission.take(client);
    res.on('close', () => this.#drop(watcher));
    this.#send(watcher, RETRY_FRAME);
    try {
      const picture = await this.#picture();
      this.#last ??= JSON.stringify(picture);
      this.#send(watcher, frame({ type: 'endpoints', endpoints: picture }));
    } catch (err) {
      this.#log.warn({ err }, 'endpoint stream: the first picture failed; the next sample sends it');
      this.#last = null;
    }
    this.#timer ??= setInterval(() => this.#sample(), this.#sampleMs);
  }

  /** Ends every stream (shutdown) and stops sampling. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#unsubscribe();
    for (const watcher of [...this.#watchers]) {
      watcher.res.end();
      this.#drop(watcher);
    }
    await this.#sampling;
  }

  #onSwitch(event: AliasRedirected): void {
    if (this.#closed || this.#watchers.size === 0) return;
    this.#broadcast(
      frame({
        type: 'switch',
        endpoint: event.alias,
        from: event.from,
        to: event.to,
        cause: event.cause ?? null,
        version: event.version ?? null,
        at: event.at,
      }),
    );
    this.#sample();
  }

  /** Takes a sample unless one runs; one asked for meanwhile runs right after it (a switch must not be missed). */
  #sample(): void {
    if (this.#closed) return;
    if (this.#sampling) {
      this.#again = true;
      return;
    }
    this.#sampling = (async () => {
      do {
        this.#again = false;
        try {
          const picture = await this.#picture();
          const json = JSON.stringify(picture);
          if (json !== this.#last) {
            this.#last = json;
            this.#broadcast(frame({ type: 'endpoints', endpoints: picture }));
          }
        } catch (err) {
          this.#log.warn({ err }, 'endpoint stream: sampling failed; retrying at the next interval');
        }
      } while (this.#again && !this.#closed);
    })().finally(() => {
      this.#sampling = null;
    });
  }

  async #picture(): Promise<EndpointWatchView[]> {
    const statuses = await this.#endpoints.status();
    return Promise.all(
      statuses.map(async (status) => {
        const { generations, history } = await this.#endpoints.generations(status.name);
        return { ...status, generations, history };
      }),
    );
  }

  #broadcast(text: string): void {
    for (const watcher of this.#watchers) this.#send(watcher, text);
  }

  #send(watcher: Watcher, text: string): void {
    if (watcher.res.destroyed || watcher.res.writableEnded) return;
    if (watcher.res.writableLength > MAX_BUFFERED_BYTES) {
      this.#log.warn('endpoint stream: a watcher stopped reading; disconnected');
      watcher.res.destroy();
      this.#drop(watcher);
      return;
    }
    watcher.res.write(text);
  }

  #drop(watcher: Watcher): void {
    clearInterval(watcher.heartbeat);
    watcher.cancelExpiry();
    // Dropped from every path (close, cut-off, expiry, shutdown), once: the client's slot is given back once.
    if (!this.#watchers.delete(watcher)) return;
    this.#admission.give(watcher.client);
    if (this.#watchers.size === 0 && this.#timer) {
      clearInterval(this.#timer);
      this.#timer = null;
      // A watcher arriving later gets a fresh picture; changes meanwhile were seen by nobody.
      this.#last = null;
    }
  }
}

const StreamQuery = z.strictObject({
  heartbeatMs: z.coerce
    .number()
    .int()
    .min(1_000)
    .max(60_000)
    .optional()
    .describe('Heartbeat comment interval (default 15 000 ms), for proxies with short idle timeouts'),
});

/**
 * `GET /v1/endpoints/stream`: the host's endpoints as Server-Sent Events — `endpoints` (status, generations and
 * alias history of every endpoint) on connect and on every change, `switch` on every alias switch, heartbeat
 * comments. Registered inside the control API, so it is authorized like the rest of it; a stream opened with a JWT
 * ends when the token expires (`exp`), and reconnecting with it is then a 401.
 *
 * @example
 * ```ts
 * await app.register(endpointStreamRoutes, { endpoints, switches: serving.onSwitch });
 * // curl -N -H 'authorization: Bearer …' localhost:7070/v1/endpoints/stream
 * ```
 */
export async function endpointStreamRoutes(
  app: FastifyInstance,
  options: EndpointStreamOptions,
): Promise<void> {
  const hub = new EndpointWatchHub(options, app.log);
  const defaultHeartbeatMs = options.heartbeatMs ?? 15_000;
  // Streams never end on their own: end them before the server waits for its connections to close.
  app.addHook('preClose', async () => hub.close());
  if (options.metrics)
    new Gauge({
      name: 'sluice_endpoint_stream_watchers',
      help: 'Endpoint streams (GET /v1/endpoints/stream) open on this node',
      registers: [options.metrics],
      collect() {
        this.set(hub.size);
      },
    });

  app.withTypeProvider<ZodTypeProvider>().get(
    '/v1/endpoints/stream',
    {
      schema: {
        summary:
          'Endpoint status as Server-Sent Events (endpoints on connect and on change, switch, heartbeats)',
        description:
          '`event: endpoints` `{endpoints: [...]}`: every endpoint of this host as `GET /v1/endpoints` reports it, with `generations` and `history` as `GET /v1/endpoints/:name/generations`; sent on connect and whenever any of it changes. `event: switch` `{endpoint, from, to, cause, version, at}`: an alias switch of this host. `: heartbeat` comments every `heartbeatMs`. A stream opened with a JWT ends at its `exp` (reconnecting with it is a 401).',
        querystring: StreamQuery,
        // 429 QUEUE_FULL (retry-after): as many streams open as `control.maxStreams`, or of this client as
        // `control.maxStreamsPerClient` (the problem's `limit` names which).
        response: { 200: EndpointStreamResponse, ...CONTROL_PROBLEMS, 429: ProblemSchema },
      },
    },
    async (request, reply) => {
      // The token's client with control.auth; without it (or on an open path) the socket's peer.
      const client = request.bearerGrant?.client ?? addressClient(request.socket.remoteAddress);
      const refused = hub.refusal(client);
      // problemDetailsPlugin answers it with `retry-after`. Nothing awaits from here to `hub.watch`, which takes
      // the slot: no other request of this client slips in between.
      if (refused) throw refused;
      reply.hijack();
      const res = reply.raw;
      startEventStream(res);
      if (request.method === 'HEAD') {
        // A GET's headers and no body (RFC 9110). Not a stream: a HEAD response never writes the bytes that would
        // send its headers (node sends them at the end), so a watched one held a watcher and never answered.
        res.end();
        return reply;
      }
      request.raw.socket.setNoDelay(true);
      await hub.watch(
        res,
        request.query.heartbeatMs ?? defaultHeartbeatMs,
        request.bearerGrant?.expiresAt ?? null,
        client,
      );
      return reply;
    },
  );
}
