import { type Filter, InvalidQueryError, MalformedJsonError, type QueryLimits } from '@sluice/core';
import { startEventStream } from '@sluice/http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Registry } from 'prom-client';
import { z } from 'zod';
import type { PositionSeal } from '../position-seal.js';
import type { EndpointRegistry } from '../registry.js';
import {
  ChangeStreamResponse,
  ENDPOINT_PROBLEMS,
  EndpointParamsSchema,
  FeedHeadersSchema,
  ProblemSchema,
} from '../schemas.js';
import type { Lease } from '../serving-table.js';
import { FeedFilter, FILTER_PATH } from './feed-filter.js';
import { RETRY_FRAME } from './frames.js';
import { ChangeFeedHub, type ChangeFeedSettings } from './hub.js';
import type { FeedStart } from './subscriber.js';
import { decodeFeedToken } from './token.js';

export interface ChangeFeedPluginOptions {
  registry: EndpointRegistry;
  settings: ChangeFeedSettings;
  limits: QueryLimits;
  metrics: Registry;
  /**
   * Auth: throws when the request may not read `endpoint`; returns the token's row filter and when the token
   * expires (the feed ends then).
   */
  access(request: FastifyRequest, endpoint: string): FeedGrant;
  /**
   * Read-your-writes (`sluice-min-position`), as every endpoint route has it: a lease on a generation that has
   * committed the request's position (the one given, or one taken after waiting for it), or the refusal (400,
   * 503 POSITION_NOT_REACHED) with every lease released. The feed starts from that generation, so its snapshot (or
   * the changes after a token, up to `live`) holds the write. A generation the wait moves to is held to the
   * token's `rowFilter` (403 when it does not fit), as the one it started from is.
   */
  awaitPosition(
    request: FastifyRequest,
    endpoint: string,
    lease: Lease,
    rowFilter: Filter | undefined,
  ): Promise<Lease>;
  /**
   * Sets the freshness headers of every data response (`sluice-cache`, `sluice-checkpoint`, `sluice-position`) for
   * the generation the feed starts from, read before its first event: the snapshot (or the changes up to `live`)
   * is at least that fresh.
   */
  stamp(reply: FastifyReply, lease: Lease): void;
  /**
   * Seals the tokens a row-filtered feed hands out and opens them when they come back (position-seal.ts); null when
   * auth is off.
   */
  seal: PositionSeal | null;
  /** Receives the hub (tests and the server read its counts). */
  onHub?(hub: ChangeFeedHub): void;
}

/** What a request's token lets a feed read: its row filter, and until when (epoch ms; null: no expiry). */
export interface FeedGrant {
  rowFilter: Filter | undefined;
  expiresAt: number | null;
  /**
   * Who opens the feed, for `api.changes.maxPerClient`: the token's client (`TokenScope.client`) with auth, the
   * remote address (`address:<ip>`) without.
   */
  client: string;
}

/** The feed's parameters; any other is refused (400 at `querystring.<name>`) rather than ignored. */
export const ChangesQuerySchema = z.strictObject({
  after: z.string().min(1).max(2048).optional().describe('Resume after this token (the `id` of an event)'),
  snapshot: z
    .enum(['true', 'false'])
    .optional()
    .describe('Start with a snapshot (the default without a token)'),
  filter: z.string().max(65_536).optional().describe('A $filter (JSON) of the query language'),
});

/**
 * `GET /v1/endpoints/:name/changes`: the endpoint's change feed as Server-Sent Events. Written on fastify's raw
 * reply (hijacked) rather than an SSE helper: each change is framed once and the same text goes to every
 * unfiltered subscriber, and the bounded per-subscriber buffer needs the socket's own `writableLength`.
 *
 * @example
 * ```ts
 * await app.register(changeFeedPlugin, { registry, settings: config.api.changes, limits, metrics: metrics.registry, access, awaitPosition, stamp, seal });
 * // curl -N 'localhost:8080/v1/endpoints/items/changes?after=c1.…'
 * ```
 */
export async function changeFeedPlugin(
  app: FastifyInstance,
  options: ChangeFeedPluginOptions,
): Promise<void> {
  const { registry, settings, limits } = options;
  const hub = new ChangeFeedHub(registry, settings, app.log, options.metrics, options.seal);
  options.onHub?.(hub);
  // Feeds never end on their own: end them before the server waits for its connections to close.
  app.addHook('preClose', async () => hub.close());

  app.withTypeProvider<ZodTypeProvider>().get(
    '/v1/endpoints/:name/changes',
    {
      schema: {
        summary:
          'Change feed (text/event-stream): upsert/delete/commit in commit order, snapshot, live, switch, reset; resume with after= or Last-Event-ID',
        params: EndpointParamsSchema,
        querystring: ChangesQuerySchema,
        headers: FeedHeadersSchema,
        // 429 QUEUE_FULL (retry-after): as many subscribers as `api.changes.maxSubscribers`, or of this client as
        // `api.changes.maxPerClient` (the problem's `limit` names which).
        response: { 200: ChangeStreamResponse, ...ENDPOINT_PROBLEMS, 429: ProblemSchema },
      },
    },
    async (request, reply) => {
      const name = request.params.name;
      const { rowFilter, expiresAt, client } = options.access(request, name);
      const query = request.query;
      const header = request.headers['last-event-id'];
      const fromHeader = query.after === undefined && typeof header === 'string' && header.length > 0;
      const raw = query.after ?? (fromHeader ? (header as string) : undefined);
      const position =
        raw === undefined
          ? null
          : decodeFeedToken(
              raw,
              name,
              fromHeader ? 'headers.last-event-id' : 'querystring.after',
              options.seal,
            );
      let json: unknown;
      if (query.filter !== undefined) {
        try {
          json = JSON.parse(query.filter);
        } catch (err) {
          // Named where it is, as every other query-string refusal is (the code says what is wrong with it).
          const reason = `not valid JSON: ${(err as Error).message}`;
          throw new MalformedJsonError(`filter is ${reason}`, {}, [{ path: FILTER_PATH, message: reason }]);
        }
        // The filter checker reads a missing filter as {} and would read `null` so too: a feed of every record
        // for a filter that is not one. A query body that is not an object is refused the same way.
        if (typeof json !== 'object' || json === null || Array.isArray(json)) {
          const received = json === null ? 'null' : Array.isArray(json) ? 'array' : typeof json;
          throw new InvalidQueryError('Invalid query: filter must be a JSON object (a $filter)', [
            { path: FILTER_PATH, message: `expected an object, received ${received}` },
          ]);
        }
      }
      const refused = hub.refusal(client);
      if (refused) throw refused;
      // With sluice-min-position, the generation the feed starts from has committed it (waiting, bounded, for that
      // commit): refused before any stream bytes otherwise, as the endpoint's other routes refuse.
      const lease = await options.awaitPosition(request, name, registry.acquire(name), rowFilter);
      const filters = new FeedFilter(name, json, rowFilter, limits);
      try {
        // Others (this client's other requests too) may have subscribed while this request waited.
        const refusedNow = hub.refusal(client);
        if (refusedNow) throw refusedNow;
        // Checked against the endpoint's fields as a query's $filter is: an unknown field or an operand of the
        // wrong type is a 400 (a row filter that does not fit a 403), not a feed that never sends a record. Each
        // generation the feed moves to later is checked the same way (feed-filter.ts).
        filters.check(lease.cache);
      } catch (err) {
        lease.release();
        throw err;
      }
      if (request.raw.socket.destroyed) {
        // The client left while the request waited: a subscriber on its socket would never see it close.
        lease.release();
        reply.hijack();
        return reply;
      }
      // On the reply before it is hijacked: its headers are copied into the stream's head below (HEAD's too).
      options.stamp(reply, lease);
      const start: FeedStart =
        position === null || query.snapshot === 'true' ? { kind: 'snapshot' } : { kind: 'resume', position };
      reply.hijack();
      const res = reply.raw;
      const headers: Record<string, string | number | string[]> = {};
      for (const [key, value] of Object.entries(reply.getHeaders()))
        if (value !== undefined) headers[key] = value as string | number | string[];
      startEventStream(res, headers);
      if (request.method === 'HEAD') {
        // A GET's headers and no body (RFC 9110). Not a feed: a HEAD response never writes the bytes that would
        // send its headers (node sends them at the end), so an opened feed held a subscription and never answered.
        lease.release();
        res.end();
        return reply;
      }
      request.raw.socket.setNoDelay(true);
      res.write(RETRY_FRAME);
      // No filter at all: the subscriber takes the frames shared by every unfiltered one as they are.
      const filtered = json !== undefined || rowFilter !== undefined;
      const feed = hub.subscribe(name, client, res, filtered ? filters : null, expiresAt);
      void feed.run(start, { name: lease.generation.name, cache: lease.cache, release: lease.release });
      return reply;
    },
  );
}
