import { createServer, type Server, type ServerOptions } from 'node:http';
import cors from '@fastify/cors';
import jwt from '@fastify/jwt';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import {
  type CommitState,
  type Filter,
  issuesOf,
  parseCountQuery,
  type QueryLimits,
  RecordNotFoundError,
  type SluiceConfig,
  ValidationError,
} from '@sluice/core';
import {
  PROBLEM_HTTP_OPTIONS,
  problemClientErrors,
  problemDetailsPlugin,
  problemFrameworkErrors,
} from '@sluice/http';
import Fastify, { type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import { jsonSchemaTransform, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Logger as PinoLogger } from 'pino';
import type { z } from 'zod';
import { TokenAuthenticator } from './auth.js';
import { changeFeedPlugin } from './changes/plugin.js';
import { CACHE_HEADER, CHECKPOINT_HEADER, checkpointStamps } from './checkpoint-headers.js';
import { endpointAccess } from './endpoint-access.js';
import { fastLookupRoute } from './fast-lookup.js';
import { fastQueryRoute } from './fast-query.js';
import type { FastRoute } from './fast-route.js';
import { MIN_POSITION_HEADER, POSITION_HEADER, refuseMinPosition } from './freshness.js';
import { InFlight } from './in-flight.js';
import { rawKeyParameter, rawKeySegment } from './keys.js';
import type { ApiMetrics } from './metrics.js';
import { PositionSeal } from './position-seal.js';
import { queryBody } from './query-body.js';
import { queryPage } from './query-page.js';
import { recordReader } from './record-read.js';
import type { EndpointRegistry } from './registry.js';
import { requestMetricsHook, requestRecorder } from './request-metrics.js';
import {
  BODY_PROBLEMS,
  CountBodySchema,
  CountResultSchema,
  ENDPOINT_PROBLEMS,
  type EndpointInfo,
  EndpointInfoSchema,
  EndpointListSchema,
  EndpointParamsSchema,
  HealthSchema,
  ListHeadersSchema,
  MinPositionHeadersSchema,
  NoQuerySchema,
  ProblemSchema,
  QueryResultSchema,
  queryBodySchema,
  ReadySchema,
  RecordKeyQuerySchema,
  RecordParamsSchema,
  RecordSchema,
  ROUTE_PROBLEMS,
} from './schemas.js';
import type { Generation, Lease } from './serving-table.js';
import { visibleCheckpoint } from './visible-positions.js';

/** Longest path parameter the router passes to a route: an 8 KiB record key, percent-encoded. */
const MAX_PATH_PARAM_LENGTH = 9_000;

/** The server settings fastify hands a `serverFactory` (the ones its own HTTP/1 server would be given). */
interface ServerSettings {
  http?: ServerOptions;
  keepAliveTimeout: number;
  requestTimeout: number;
  connectionTimeout: number;
  maxRequestsPerSocket: number;
}

/** The fastify instance of an api-server. */
export type ApiApp = Awaited<ReturnType<typeof buildApp>>;

const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

export interface BuildAppOptions {
  config: SluiceConfig;
  registry: EndpointRegistry;
  metrics: ApiMetrics;
  limits: QueryLimits;
  logger: PinoLogger;
  /** Readiness is withdrawn (503) once this returns true (graceful shutdown); the fast routes take nothing new then. */
  isStopping: () => boolean;
  /**
   * Readiness is withdrawn (503 `stopping`) while this returns true, every request still served: the drain SIGTERM
   * begins with (`@sluice/http`'s `ShutdownDrain`), for a load balancer to take the server out first.
   */
  isDraining?: () => boolean;
  /** Counts the requests the fast routes took, for a shutdown to wait for (default: a counter of its own). */
  inFlight?: InFlight;
}

/**
 * An endpoint as a reader may see it: with a token's row filter, `recordCount` counts the records that filter
 * lets through (what the token's `POST …/count` answers), never the generation's total, which would tell the
 * reader how many records are hidden from it; for the same reason the checkpoint's positions keep only
 * replication sources' LSNs (visible-positions.ts), not the sink's record counters or a file source's line count.
 */
function describe(
  generation: Generation,
  rowFilter: Filter | undefined,
  state: Readonly<CommitState> = generation.cache.commitState(),
): EndpointInfo {
  return {
    name: generation.alias,
    cache: generation.name,
    version: generation.version,
    checkpoint: visibleCheckpoint(state.checkpoint, rowFilter !== undefined),
    committedAt: state.committedAt,
    // A row filter no index narrows to `cache.scanCap` records is not counted here (the count route refuses it too).
    recordCount:
      rowFilter === undefined ? state.recordCount : generation.cache.countWithinCap({}, { rowFilter }),
    schema: generation.cache.schema,
  };
}

/**
 * Builds the fastify application of the api-server (routes, auth, CORS, OpenAPI, metrics, problem details).
 * `startApiServer` wires it to the cache manager and the backplane; tests and embedders may use it directly.
 *
 * @example
 * ```ts
 * const app = await buildApp({ config, registry, metrics, limits: queryLimitsOf(config), logger, isStopping });
 * await app.listen({ port: 8080 });
 * ```
 */
export async function buildApp(options: BuildAppOptions) {
  const { config, registry, metrics, limits } = options;
  const bodyLimit = config.http.bodyBytes;
  // Set once the routes exist: point lookups are answered below fastify when they can be (fast-lookup.ts).
  let fastLookup: FastRoute | null = null;
  // Set once fastify is ready: range queries are answered below fastify when they can be (fast-query.ts).
  let fastQuery: FastRoute | null = null;
  const app = Fastify({
    loggerInstance: options.logger,
    // No per-request log lines: at tens of thousands of requests per second they would cost more than the
    // query. Failures are logged by the error handler; rates and latencies are in /metrics.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    // A request without Host is refused as a problem by problemDetailsPlugin, not with Node's bare 400.
    http: { ...PROBLEM_HTTP_OPTIONS },
    // 8 KiB keys plus the rest of the path; a longer one is refused by the router, as a problem.
    routerOptions: { maxParamLength: MAX_PATH_PARAM_LENGTH },
    frameworkErrors: problemFrameworkErrors({ bodyLimit, maxParamLength: MAX_PATH_PARAM_LENGTH }),
    // What Node's HTTP parser refuses (a header block over 16 KiB, bytes that are not HTTP), as problems too.
    clientErrorHandler: problemClientErrors,
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // problemDetailsPlugin refuses requests reaching a closing server as problems (NODE_SHUTTING_DOWN).
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // The server fastify would create (same timeouts), with the fast lookups in front of fastify's handler.
    serverFactory: (handler, factoryOptions): Server => {
      // fastify passes its resolved options (its defaults filled in).
      const settings = factoryOptions as unknown as ServerSettings;
      const server = createServer(settings.http ?? {}, (request, response) => {
        if (fastLookup?.(request, response)) return;
        if (fastQuery?.(request, response)) return;
        handler(request, response);
      });
      server.keepAliveTimeout = settings.keepAliveTimeout;
      server.requestTimeout = settings.requestTimeout;
      server.setTimeout(settings.connectionTimeout);
      if (settings.maxRequestsPerSocket > 0) server.maxRequestsPerSocket = settings.maxRequestsPerSocket;
      return server;
    },
  }).withTypeProvider<ZodTypeProvider>();

  // Route params are checked with their zod schemas; bodies are parsed in the handlers by core's query
  // parser, which applies the configured limits and names the failing path.
  app.setValidatorCompiler(({ schema, httpPart }) => {
    // Bodies are checked by the handlers (core's query parser with the configured limits), so the hot path does not
    // validate twice; their zod schemas still document the API.
    // `true` leaves the part as it is: fastify validates an absent body as `null` and would store a `{ value }`
    // back, so a body that was never sent would read as a body of `null` (which `queryBody` refuses).
    // Headers likewise: each is parsed where it is read (`sluice-min-position` by freshness.ts, `Last-Event-ID` by
    // the feed); their schemas only document them, and a zod parse would hand back only the headers it names.
    // Path parameters are checked (an empty name or key segment is 400 at `params.<name>`, as on the control API,
    // not an endpoint or a key named ""); the lookups answered below fastify never get here.
    if (httpPart === 'body' || httpPart === 'headers') return () => true;
    const zod = schema as z.ZodType;
    return (data: unknown) => {
      const parsed = zod.safeParse(data);
      if (parsed.success) return { value: parsed.data };
      // core's paths: an unknown parameter at its own path (`querystring.foo`), as a body's unknown key is.
      const errors = issuesOf(parsed.error, [httpPart ?? 'request']);
      return {
        error: new ValidationError(`Invalid ${httpPart}: ${errors[0]?.path}: ${errors[0]?.message}`, errors),
      };
    };
  });
  // JSON bodies only (415 otherwise, plain JSON.parse so the query parser refuses reserved keys naming their path),
  // RFC 9457 problem details for every error and unknown route, www-authenticate on 401, retry-after on
  // POSITION_NOT_REACHED, 503 logged as a warning.
  await app.register(problemDetailsPlugin, { bodyLimit });
  // Plain JSON: records are arbitrary objects, which a schema-driven serializer would have to drop fields from.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));

  // Metrics: one counter increment and one histogram observation per request.
  const recordRequest = requestRecorder(registry, metrics);
  app.addHook('onResponse', requestMetricsHook(recordRequest));

  if (config.api.cors) {
    await app.register(cors, {
      origin: config.api.cors.origins === true ? true : config.api.cors.origins,
      methods: ['GET', 'POST', 'OPTIONS'],
      // Every request header the API reads: a browser sends none the preflight does not list (read-your-writes
      // with `sluice-min-position`, a feed resumed by `last-event-id` would fail as a network error).
      allowedHeaders: ['authorization', 'content-type', MIN_POSITION_HEADER, 'last-event-id'],
      // Every response header a client reads; `retry-after` says when to ask again (503 POSITION_NOT_REACHED, 429).
      exposedHeaders: [CACHE_HEADER, CHECKPOINT_HEADER, POSITION_HEADER, 'retry-after'],
      maxAge: 600,
    });
  }

  let authenticator: TokenAuthenticator | null = null;
  // Seals the positions (query cursors, feed ids) handed to row-filtered tokens; row filters exist only with auth.
  let seal: PositionSeal | null = null;
  const auth = config.api.auth;
  if (auth) {
    seal = new PositionSeal(auth.jwtSecret);
    await app.register(jwt, {
      secret: auth.jwtSecret,
      verify: {
        algorithms: ['HS256'],
        ...(auth.issuer ? { allowedIss: auth.issuer } : {}),
        ...(auth.audience ? { allowedAud: auth.audience } : {}),
      },
    });
    const verify = (token: string) => app.jwt.verify(token);
    authenticator = new TokenAuthenticator(verify, limits);
  }
  const access = endpointAccess({
    registry,
    authenticator,
    freshnessWaitMs: config.api.freshnessWaitMs,
    limits,
  });
  const { scopeOf, authorizeFeed, openFresh, awaitPosition } = access;
  const readRecord = recordReader(limits);
  const { headersOf, stamp, stampState } = checkpointStamps();

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Sluice query API',
        version: '1',
        description:
          'Read endpoints (materialized views behind aliases). Every data response carries `sluice-cache` (the cache generation that answered), `sluice-checkpoint` and, for replication sources, `sluice-position` (RFC 8941 dictionary: source handle → committed LSN). Send `sluice-min-position` (same syntax, or a bare LSN for a one-source endpoint) to be answered only once that position is committed (waits up to `api.freshnessWaitMs`, else 503 POSITION_NOT_REACHED with retry-after).',
      },
      ...(auth
        ? {
            components: {
              securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
            },
            security: [{ bearer: [] }],
          }
        : {}),
    },
    transform: jsonSchemaTransform,
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });

  app.get('/healthz', { schema: { hide: true, response: { 200: HealthSchema } } as never }, async () => ({
    status: 'ok',
  }));
  app.get(
    '/readyz',
    { schema: { hide: true, response: { 200: ReadySchema, 503: ReadySchema } } as never },
    async (_request, reply) => {
      const stopping = options.isStopping() || options.isDraining?.() === true;
      const ready = registry.ready && !stopping;
      return reply.code(ready ? 200 : 503).send(<never>{
        status: stopping ? 'stopping' : ready ? 'ready' : 'starting',
        endpoints: registry.names().length,
        backplane: registry.eventStatus(),
      });
    },
  );
  app.get('/metrics', { schema: { hide: true } as never }, async (_request, reply) => {
    const text = await metrics.registry.metrics();
    return reply.type(metrics.registry.contentType).send(text);
  });

  app.get(
    '/v1/endpoints',
    {
      schema: {
        summary: 'List endpoints with their serving cache, checkpoint, record count and schema',
        querystring: NoQuerySchema,
        headers: ListHeadersSchema,
        response: { 200: EndpointListSchema, ...ROUTE_PROBLEMS },
      },
    },
    async (request) => {
      const scope = scopeOf(request);
      // Refused, not ignored (after auth, as the endpoint routes read it): the list answers at once, and a 200
      // would read as "every endpoint has committed it".
      refuseMinPosition(request.headers[MIN_POSITION_HEADER], 'GET /v1/endpoints');
      const endpoints: EndpointInfo[] = [];
      for (const name of registry.names().sort()) {
        if (!scope.allows(name)) continue;
        const rowFilter = scope.rowFilter(name);
        if (rowFilter === undefined) {
          const generation = registry.current(name);
          if (generation) endpoints.push(describe(generation, undefined));
          continue;
        }
        // Counting under the row filter reads the generation: hold it (a switch may close it meanwhile).
        let lease: Lease;
        try {
          lease = registry.acquire(name);
        } catch {
          continue; // not open (yet): as an endpoint with no current generation, left out
        }
        try {
          // A row filter that does not fit is 403 on the endpoint's own routes: left out here, as out of scope.
          if (access.rowFilterFits(lease, rowFilter)) endpoints.push(describe(lease.generation, rowFilter));
        } finally {
          lease.release();
        }
      }
      return { endpoints };
    },
  );

  app.get(
    '/v1/endpoints/:name',
    {
      schema: {
        summary: 'One endpoint: serving cache, checkpoint, record count, schema',
        params: EndpointParamsSchema,
        querystring: NoQuerySchema,
        headers: MinPositionHeadersSchema,
        response: { 200: EndpointInfoSchema, ...ENDPOINT_PROBLEMS },
      },
    },
    async (request, reply) => {
      const { lease, rowFilter } = await openFresh(request, request.params.name);
      try {
        // The headers name the commit the body describes.
        const state = lease.cache.servingState();
        reply.header(CACHE_HEADER, lease.generation.name);
        stampState(reply, state);
        return describe(lease.generation, rowFilter, state);
      } finally {
        lease.release();
      }
    },
  );

  /** Answers the record named by `raw`, a key segment as it appears in the URL (still percent-encoded). */
  const sendRecord = async (request: FastifyRequest, reply: FastifyReply, name: string, raw: string) => {
    const { lease, rowFilter } = await openFresh(request, name);
    try {
      reply.header(CACHE_HEADER, lease.generation.name);
      const { state, bytes } = readRecord(lease, raw, rowFilter);
      stampState(reply, state);
      if (bytes === undefined) throw new RecordNotFoundError(name, safeDecode(raw));
      // Stored bytes go out as they are (fastify sends a Buffer without serializing it).
      return reply.type(JSON_CONTENT_TYPE).send(bytes as never);
    } finally {
      lease.release();
    }
  };

  app.get(
    '/v1/endpoints/:name/records/:key',
    {
      schema: {
        summary: 'One record by primary key',
        params: RecordParamsSchema,
        querystring: NoQuerySchema,
        headers: MinPositionHeadersSchema,
        response: { 200: RecordSchema, ...ENDPOINT_PROBLEMS },
      },
    },
    (request, reply) => sendRecord(request, reply, request.params.name, rawKeySegment(request.url)),
  );

  app.get(
    '/v1/endpoints/:name/records',
    {
      schema: {
        summary:
          'One record by primary key sent as the `key` parameter (the form for a single-field key that is the empty string: `?key=`)',
        params: EndpointParamsSchema,
        querystring: RecordKeyQuerySchema,
        headers: MinPositionHeadersSchema,
        response: { 200: RecordSchema, ...ENDPOINT_PROBLEMS },
      },
    },
    // The schema required exactly one `key`: the raw text is there.
    (request, reply) => sendRecord(request, reply, request.params.name, rawKeyParameter(request.url) ?? ''),
  );

  app.post(
    '/v1/endpoints/:name/query',
    {
      schema: {
        summary: 'Query records: $filter, $order_by, $limit, $skip | $after → {records, next}',
        params: EndpointParamsSchema,
        querystring: NoQuerySchema,
        headers: MinPositionHeadersSchema,
        body: queryBodySchema(limits).optional(),
        response: { 200: QueryResultSchema, 410: ProblemSchema, ...BODY_PROBLEMS },
      },
    },
    async (request, reply) => {
      const { lease, rowFilter } = await openFresh(request, request.params.name);
      try {
        reply.header(CACHE_HEADER, lease.generation.name);
        // The body as one buffer (stored record bytes between the frame's head and tail, the cursor wrapped
        // for this generation), with the commit state of the same snapshot.
        const page = queryPage(lease, request.body, rowFilter, limits, seal);
        stampState(reply, page.state);
        return reply.type(JSON_CONTENT_TYPE).send(page.json as never);
      } finally {
        lease.release();
      }
    },
  );

  app.post(
    '/v1/endpoints/:name/count',
    {
      schema: {
        summary: 'Count records matching $filter → {count}',
        params: EndpointParamsSchema,
        querystring: NoQuerySchema,
        headers: MinPositionHeadersSchema,
        body: CountBodySchema.optional(),
        response: { 200: CountResultSchema, ...BODY_PROBLEMS },
      },
    },
    async (request, reply) => {
      const { lease, rowFilter } = await openFresh(request, request.params.name);
      try {
        stamp(reply, lease);
        const filter = parseCountQuery(queryBody(request.body), limits);
        // The row filter is checked apart from the caller's filter (core's ReadScope), then ANDed in.
        return { count: lease.cache.count(filter, rowFilter === undefined ? {} : { rowFilter }) };
      } finally {
        lease.release();
      }
    },
  );

  fastLookup = fastLookupRoute({
    registry,
    access,
    readRecord,
    headersOf,
    record: recordRequest,
    cors: config.api.cors !== undefined && config.api.cors !== null,
    isStopping: options.isStopping,
  });

  fastQuery = fastQueryRoute({
    registry,
    access,
    limits,
    seal,
    headersOf,
    record: recordRequest,
    bodyLimit,
    cors: config.api.cors !== undefined && config.api.cors !== null,
    isStopping: options.isStopping,
    inject: (request) => app.inject(request),
    inFlight: options.inFlight ?? new InFlight(),
  });

  await app.register(changeFeedPlugin, {
    registry,
    settings: config.api.changes,
    limits,
    metrics: metrics.registry,
    access: authorizeFeed,
    awaitPosition,
    stamp,
    seal,
  });

  return app;
}

function safeDecode(raw: string): string {
  try {
    return decodeURIComponent(raw).slice(0, 256);
  } catch {
    return raw.slice(0, 256);
  }
}
