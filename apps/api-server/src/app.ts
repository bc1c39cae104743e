import cors from '@fastify/cors';
import jwt from '@fastify/jwt';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import {
  andFilters,
  type CommitState,
  compileFilter,
  type Filter,
  PositionNotReachedError,
  parseCountQuery,
  parseQuery,
  type QueryLimits,
  RecordNotFoundError,
  type SluiceConfig,
  ValidationError,
} from '@sluice/core';
import { problemDetailsPlugin } from '@sluice/http';
import Fastify, { type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import { jsonSchemaTransform, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Logger as PinoLogger } from 'pino';
import type { z } from 'zod';
import { OPEN_SCOPE, TokenAuthenticator, type TokenScope } from './auth.js';
import { changeFeedPlugin } from './changes/plugin.js';
import { unwrapCursor, wrapCursor } from './cursor.js';
import {
  bareMismatch,
  formatPositionHeader,
  MIN_POSITION_HEADER,
  POSITION_HEADER,
  parseMinPosition,
  positionReached,
} from './freshness.js';
import { parseKeySegment, rawKeySegment } from './keys.js';
import type { ApiMetrics } from './metrics.js';
import { pageBody } from './page-body.js';
import type { EndpointRegistry, Generation, Lease } from './registry.js';
import {
  CountBodySchema,
  CountResultSchema,
  type EndpointInfo,
  EndpointInfoSchema,
  EndpointListSchema,
  EndpointParamsSchema,
  HealthSchema,
  ProblemSchema,
  QueryResultSchema,
  queryBodySchema,
  ReadySchema,
  RecordParamsSchema,
  RecordSchema,
} from './schemas.js';

/** The fastify instance of an api-server. */
export type ApiApp = Awaited<ReturnType<typeof buildApp>>;

/** Response header naming the concrete cache generation that answered. */
export const CACHE_HEADER = 'sluice-cache';
/** Response header with the commit checkpoint of that cache (read before the data, so data ⊇ checkpoint). */
export const CHECKPOINT_HEADER = 'sluice-checkpoint';
const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';
/** Longest time a `sluice-checkpoint` value is reused before the cache's commit state is read again. */
export const CHECKPOINT_REFRESH_MS = 50;

export interface BuildAppOptions {
  config: SluiceConfig;
  registry: EndpointRegistry;
  metrics: ApiMetrics;
  limits: QueryLimits;
  logger: PinoLogger;
  /** Readiness is withdrawn (503) once this returns true (graceful shutdown). */
  isStopping: () => boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    sluiceScope?: TokenScope;
    sluiceEndpoint?: string;
  }
}

/**
 * Formats the `sluice-checkpoint` header: `epoch=<n>, at="<checkpoint instant>", committed-at="<instant>"`
 * (an RFC 8941 dictionary), or `none` for a cache that has not committed a checkpoint yet.
 */
export function formatCheckpointHeader(state: Readonly<CommitState>): string {
  const checkpoint = state.checkpoint;
  if (!checkpoint) return state.committedAt ? `none, committed-at="${state.committedAt}"` : 'none';
  const committed = state.committedAt ? `, committed-at="${state.committedAt}"` : '';
  return `epoch=${checkpoint.epoch}, at="${checkpoint.at}"${committed}`;
}

function describe(generation: Generation): EndpointInfo {
  const state = generation.cache.commitState();
  return {
    name: generation.alias,
    cache: generation.name,
    version: generation.version,
    checkpoint: state.checkpoint,
    committedAt: state.committedAt,
    recordCount: state.recordCount,
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
  const app = Fastify({
    loggerInstance: options.logger,
    // No per-request log lines: at tens of thousands of requests per second they would cost more than the
    // query. Failures are logged by the error handler; rates and latencies are in /metrics.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    // 8 KiB keys plus the rest of the path.
    routerOptions: { maxParamLength: 9_000 },
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    // problemDetailsPlugin refuses requests reaching a closing server as problems (NODE_SHUTTING_DOWN).
    return503OnClosing: false,
    forceCloseConnections: 'idle',
  }).withTypeProvider<ZodTypeProvider>();

  // Route params are checked with their zod schemas; bodies are parsed in the handlers by core's query
  // parser, which applies the configured limits and names the failing path.
  app.setValidatorCompiler(({ schema, httpPart }) => {
    // Bodies and path parameters are checked by the handlers (core's query parser with the configured limits;
    // the endpoint registry; the key codec), so the hot path does not validate twice. Their zod schemas still
    // document the API.
    if (httpPart === 'body' || httpPart === 'params') return (data: unknown) => ({ value: data });
    const zod = schema as z.ZodType;
    return (data: unknown) => {
      const parsed = zod.safeParse(data);
      if (parsed.success) return { value: parsed.data };
      const errors = parsed.error.issues.map((issue) => ({
        path: [httpPart ?? 'request', ...issue.path.map(String)].join('.'),
        message: issue.message,
      }));
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
  // Label children are cached per (route, endpoint, status): prom-client hashes label objects otherwise.
  const series = new Map<string, { count: () => void; observe: (seconds: number) => void }>();
  app.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? '(unmatched)';
    const name = request.sluiceEndpoint;
    const endpoint = name !== undefined && registry.has(name) ? name : '';
    const key = `${route}\u0000${endpoint}\u0000${reply.statusCode}`;
    let entry = series.get(key);
    if (!entry) {
      const counter = metrics.requests.labels(route, endpoint, String(reply.statusCode));
      const histogram = metrics.duration.labels(route, endpoint);
      entry = { count: () => counter.inc(), observe: (seconds) => histogram.observe(seconds) };
      if (series.size < 10_000) series.set(key, entry);
    }
    entry.count();
    entry.observe(reply.elapsedTime / 1000);
    done();
  });

  if (config.api.cors) {
    await app.register(cors, {
      origin: config.api.cors.origins === true ? true : config.api.cors.origins,
      methods: ['GET', 'POST', 'OPTIONS'],
      allowedHeaders: ['authorization', 'content-type'],
      exposedHeaders: [CACHE_HEADER, CHECKPOINT_HEADER, POSITION_HEADER],
      maxAge: 600,
    });
  }

  let authenticator: TokenAuthenticator | null = null;
  const auth = config.api.auth;
  if (auth) {
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
  const scopeOf = (request: FastifyRequest): TokenScope => {
    if (!authenticator) return OPEN_SCOPE;
    const scope = authenticator.authenticate(request.headers.authorization);
    request.sluiceScope = scope;
    return scope;
  };
  /** Auth check + lease on the endpoint's current generation (the caller releases it). */
  const open = (request: FastifyRequest, name: string): { lease: Lease; rowFilter: Filter | undefined } => {
    request.sluiceEndpoint = name;
    const scope = scopeOf(request);
    authenticator?.authorize(scope, name);
    return { lease: registry.acquire(name), rowFilter: scope.rowFilter(name) };
  };
  const predicates = new WeakMap<Filter, (record: Record<string, unknown>) => boolean>();
  const predicateOf = (filter: Filter) => {
    let predicate = predicates.get(filter);
    if (!predicate) {
      predicate = compileFilter(filter);
      predicates.set(filter, predicate);
    }
    return predicate;
  };
  // The checkpoint header of a data response is formatted once per commit: the cache hands out one commit-state
  // object per commit, read in the snapshot of the data it is sent with.
  const checkpointHeaders = new WeakMap<object, { header: string; position: string | null }>();
  const stampState = (reply: FastifyReply, state: Readonly<CommitState>): void => {
    let headers = checkpointHeaders.get(state);
    if (headers === undefined) {
      headers = { header: formatCheckpointHeader(state), position: formatPositionHeader(state.checkpoint) };
      checkpointHeaders.set(state, headers);
    }
    reply.header(CHECKPOINT_HEADER, headers.header);
    if (headers.position !== null) reply.header(POSITION_HEADER, headers.position);
  };
  // Other responses (endpoint info, counts) re-read the commit state at most every CHECKPOINT_REFRESH_MS per
  // generation, always before the data they are sent with, so "the data is at least as fresh" holds.
  const checkpoints = new WeakMap<Generation, { header: string; position: string | null; readAt: number }>();
  const stamp = (reply: FastifyReply, lease: Lease): void => {
    const now = performance.now();
    let cached = checkpoints.get(lease.generation);
    if (!cached || now - cached.readAt > CHECKPOINT_REFRESH_MS) {
      const state = lease.cache.commitState();
      cached = {
        header: formatCheckpointHeader(state),
        position: formatPositionHeader(state.checkpoint),
        readAt: now,
      };
      checkpoints.set(lease.generation, cached);
    }
    reply.header(CACHE_HEADER, lease.generation.name);
    reply.header(CHECKPOINT_HEADER, cached.header);
    if (cached.position !== null) reply.header(POSITION_HEADER, cached.position);
  };
  const freshnessWaitMs = config.api.freshnessWaitMs;
  /**
   * `open`, and with `sluice-min-position` only once the leased generation has committed that position: polled
   * every few milliseconds (a commit state read) up to `api.freshnessWaitMs`, then 503 POSITION_NOT_REACHED.
   */
  const openFresh = async (request: FastifyRequest, name: string) => {
    const opened = open(request, name);
    const header = request.headers[MIN_POSITION_HEADER];
    if (header === undefined) return opened;
    let lease = opened.lease;
    try {
      const wanted = parseMinPosition(Array.isArray(header) ? header.join(', ') : header);
      const deadline = Date.now() + freshnessWaitMs;
      for (;;) {
        const checkpoint = lease.cache.commitState().checkpoint;
        if (positionReached(checkpoint, wanted)) return { ...opened, lease };
        if (bareMismatch(checkpoint, wanted))
          throw new ValidationError(
            `Endpoint "${name}" has several sources: name them in ${MIN_POSITION_HEADER}`,
            [
              {
                path: `headers.${MIN_POSITION_HEADER}`,
                message: 'a bare position needs a one-source endpoint',
              },
            ],
          );
        const remaining = deadline - Date.now();
        if (remaining <= 0)
          throw new PositionNotReachedError(
            `Endpoint "${name}" has not committed ${MIN_POSITION_HEADER} ${String(header).slice(0, 200)} within ${freshnessWaitMs} ms (it is at ${formatPositionHeader(checkpoint) ?? 'no position'})`,
            Math.max(1, Math.ceil(freshnessWaitMs / 1000)),
          );
        lease.release();
        await new Promise((resolve) => setTimeout(resolve, Math.min(remaining, 5)));
        lease = registry.acquire(name);
      }
    } catch (err) {
      lease.release();
      throw err;
    }
  };

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

  const problems = { 400: ProblemSchema, 401: ProblemSchema, 403: ProblemSchema, 404: ProblemSchema };

  app.get('/healthz', { schema: { hide: true, response: { 200: HealthSchema } } as never }, async () => ({
    status: 'ok',
  }));
  app.get(
    '/readyz',
    { schema: { hide: true, response: { 200: ReadySchema, 503: ReadySchema } } as never },
    async (_request, reply) => {
      const stopping = options.isStopping();
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
        response: { 200: EndpointListSchema, 401: ProblemSchema },
      },
    },
    async (request) => {
      const scope = scopeOf(request);
      const endpoints: EndpointInfo[] = [];
      for (const name of registry.names().sort()) {
        if (!scope.allows(name)) continue;
        const generation = registry.current(name);
        if (generation) endpoints.push(describe(generation));
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
        response: { 200: EndpointInfoSchema, ...problems },
      },
    },
    async (request, reply) => {
      const { lease } = await openFresh(request, request.params.name);
      try {
        stamp(reply, lease);
        return describe(lease.generation);
      } finally {
        lease.release();
      }
    },
  );

  app.get(
    '/v1/endpoints/:name/records/:key',
    {
      schema: {
        summary: 'One record by primary key',
        params: RecordParamsSchema,
        response: { 200: RecordSchema, ...problems },
      },
    },
    async (request, reply) => {
      const name = request.params.name;
      const { lease, rowFilter } = await openFresh(request, name);
      try {
        reply.header(CACHE_HEADER, lease.generation.name);
        const raw = rawKeySegment(request.url);
        const key = parseKeySegment(raw, lease.cache.schema);
        // The state and the record come from one read snapshot (servingState starts it, getJson reads in it).
        const state = lease.cache.servingState();
        stampState(reply, state);
        const bytes = lease.cache.getJson(key);
        // A record outside the token's row filter does not exist for that token (the only case it is decoded).
        if (bytes === undefined || (rowFilter && !predicateOf(rowFilter)(JSON.parse(bytes.toString('utf8')))))
          throw new RecordNotFoundError(name, safeDecode(raw));
        // Stored bytes go out as they are (fastify sends a Buffer without serializing it).
        return reply.type(JSON_CONTENT_TYPE).send(bytes as never);
      } finally {
        lease.release();
      }
    },
  );

  app.post(
    '/v1/endpoints/:name/query',
    {
      schema: {
        summary: 'Query records: $filter, $order_by, $limit, $skip | $after → {records, next}',
        params: EndpointParamsSchema,
        body: queryBodySchema(limits).optional(),
        response: { 200: QueryResultSchema, 410: ProblemSchema, 413: ProblemSchema, ...problems },
      },
    },
    async (request, reply) => {
      const { lease, rowFilter } = await openFresh(request, request.params.name);
      try {
        const generation = lease.generation.name;
        reply.header(CACHE_HEADER, generation);
        const query = parseQuery(request.body, limits);
        if (query.after !== null) query.after = unwrapCursor(query.after, generation);
        query.filter = andFilters(query.filter, rowFilter);
        // Records as stored bytes, with the commit state of the same snapshot.
        const page = lease.cache.queryJson(query);
        stampState(reply, page.state);
        return reply
          .type(JSON_CONTENT_TYPE)
          .send(pageBody(page.json, wrapCursor(generation, page.next)) as never);
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
        body: CountBodySchema.optional(),
        response: { 200: CountResultSchema, 413: ProblemSchema, ...problems },
      },
    },
    async (request, reply) => {
      const { lease, rowFilter } = await openFresh(request, request.params.name);
      try {
        stamp(reply, lease);
        const filter = parseCountQuery(request.body, limits);
        return { count: lease.cache.count(andFilters(filter, rowFilter)) };
      } finally {
        lease.release();
      }
    },
  );

  await app.register(changeFeedPlugin, {
    registry,
    settings: config.api.changes,
    limits,
    metrics: metrics.registry,
    access: (request, name) => {
      request.sluiceEndpoint = name;
      const scope = scopeOf(request);
      authenticator?.authorize(scope, name);
      return scope.rowFilter(name);
    },
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
