import fastifyJwt from '@fastify/jwt';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import type { DirectRoutesTarget } from '@sluice/backplane';
import { directRoutes } from '@sluice/backplane/fastify';
import {
  NameSchema,
  parseTransferRequest,
  TransferIdSchema,
  TransferRequestSchema,
  TransferStateSchema,
  ValidationError,
} from '@sluice/core';
import {
  expiredTokenError,
  isExpiredJwt,
  PROBLEM_HTTP_OPTIONS,
  problemClientErrors,
  problemDetailsPlugin,
  problemFrameworkErrors,
  refuseNullBody,
} from '@sluice/http';
import { isTransferCursor } from '@sluice/store';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import { jsonSchemaTransform, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod';
import type pino from 'pino';
import { z } from 'zod';
import type { EndpointManager } from '../endpoints.js';
import type { NodeMetrics } from '../metrics.js';
import { submissionReply, type TransferCoordinator } from '../transfers/coordinator.js';
import { type AuthSettings, bearerCheck, jwtGrant } from './auth.js';
import { consoleAssetsDir, consoleRoutes, isConsolePath } from './console-routes.js';
import {
  CONTROL_PROBLEMS,
  EndpointListReply,
  NodeListReply,
  NotReadyResponse,
  POST_PROBLEMS,
  ProblemSchema,
  ReadinessReply,
  RebuildReply,
  TransferPageReply,
  TransferReply,
} from './control-responses.js';
import { endpointStreamRoutes, type SwitchSubscription } from './endpoint-stream.js';
import { NoBody } from './no-body.js';
import { NoQuery } from './no-query.js';
import { steeringRoutes } from './steering-routes.js';

/** Longest path parameter the router passes to a route (see `routerOptions` below). */
const MAX_PATH_PARAM_LENGTH = 1_024;

export interface ServerOptions {
  logger: pino.Logger;
  bodyLimit: number;
  pageSizeMax: number;
  auth: AuthSettings | undefined;
  /** Bounds of the endpoint stream: `control.maxStreams`, and `control.maxStreamsPerClient` for one client. */
  streams: { maxStreams: number; maxStreamsPerClient: number };
  coordinator: TransferCoordinator;
  endpoints: EndpointManager;
  /** This host's alias switches, pushed to the endpoint stream as they happen. */
  switches: SwitchSubscription;
  metrics: NodeMetrics;
  nodes: () => Promise<unknown[]>;
  readiness: () => Promise<{ ready: boolean; checks: Record<string, string> }>;
  /** The direct-address backplane whose internal routes this node serves (null with another strategy). */
  direct: DirectRoutesTarget | null;
  nodeId: string;
  /** The built console (`dist/console`); default: found beside the server; null: not served. */
  consoleDir?: string | null;
}

/**
 * Routes that stay open when auth is enabled: the probes, and the console's static files (which ask for the token
 * and send it with every API call). Peers present a token on the internal routes.
 */
const OPEN_PATHS = new Set(['/healthz', '/readyz']);

const IdParams = z.object({ id: TransferIdSchema });
const NameParams = z.object({ name: NameSchema });

/**
 * Accepts the body and headers as-is — the transfer route parses its body with core's `parseTransferRequest`
 * (422 vs 400) and checks its `Idempotency-Key` itself — and checks the query string with its schema.
 */
const transferValidator = (route: { httpPart?: string }) =>
  route.httpPart === 'querystring'
    ? // fastify hands over the part's own (zod) schema, typed as the route's whole schema object.
      validatorCompiler(route as Parameters<typeof validatorCompiler>[0])
    : (data: unknown) => ({ value: data });

/**
 * Builds the control API: `/v1/transfers`, `/v1/endpoints`, `/v1/nodes`, probes, metrics, OpenAPI docs, with
 * RFC 9457 problem details for every error and optional bearer auth.
 *
 * @example
 * ```ts
 * const app = await buildServer({ logger, bodyLimit: 1 << 20, ... });
 * await app.listen({ port: 7070 });
 * ```
 */
export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: options.logger as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: options.bodyLimit,
    // A request without Host is refused as a problem by problemDetailsPlugin, not with Node's bare 400.
    http: { ...PROBLEM_HTTP_OPTIONS },
    // problemDetailsPlugin refuses requests reaching a closing server as problems (NODE_SHUTTING_DOWN).
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // Path parameters are transfer ids (up to 200 characters) and endpoint names (up to 128): fastify's default
    // of 100 refused reading a transfer with a longer id. Up to this limit the route's schema names the rule a
    // value breaks; past it the router refuses the path, as a problem too.
    routerOptions: { maxParamLength: MAX_PATH_PARAM_LENGTH },
    frameworkErrors: problemFrameworkErrors({
      bodyLimit: options.bodyLimit,
      maxParamLength: MAX_PATH_PARAM_LENGTH,
    }),
    // What Node's HTTP parser refuses (a header block over 16 KiB, bytes that are not HTTP), as problems too.
    clientErrorHandler: problemClientErrors,
  });
  app.setValidatorCompiler(validatorCompiler);
  // Plain JSON: the routes' response schemas document them (control-responses.ts). A schema-driven serializer
  // would drop what a schema does not list — a problem's details, a record's fields — or refuse the reply.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));

  // JSON bodies only, RFC 9457 problem details for every error and for unknown routes.
  await app.register(problemDetailsPlugin, { bodyLimit: options.bodyLimit });
  // Every control route takes a JSON object or no body: `null` is neither (fastify would validate it as no body).
  app.addHook('preValidation', refuseNullBody);

  app.decorateRequest('bearerGrant', null);
  if (options.auth && (options.auth.tokens?.length || options.auth.jwtSecret)) {
    const jwtSecret = options.auth.jwtSecret;
    if (jwtSecret) await app.register(fastifyJwt, { secret: jwtSecret, verify: { algorithms: ['HS256'] } });
    const check = bearerCheck(
      options.auth,
      jwtSecret
        ? async (token) => {
            let claims: unknown;
            try {
              claims = app.jwt.verify(token);
            } catch (err) {
              if (isExpiredJwt(err)) throw expiredTokenError();
              return null;
            }
            // Verified, but a time claim may still be unusable: that 401 names the claim.
            return jwtGrant(token, claims);
          }
        : null,
    );
    app.addHook('onRequest', async (request) => {
      const path = request.url.split('?')[0] ?? '';
      if (OPEN_PATHS.has(path) || isConsolePath(path)) return;
      request.bearerGrant = await check(request.headers.authorization);
    });
  }

  await app.register(fastifySwagger, {
    openapi: {
      info: {
        title: 'Sluice app-server control API',
        version: '0.1.0',
        description: 'Transfers (idempotent and fire-and-forget), endpoints, nodes, probes.',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    },
    transform: jsonSchemaTransform,
  });
  await app.register(fastifySwaggerUi, { routePrefix: '/docs' });

  const api = app.withTypeProvider<ZodTypeProvider>();
  const { coordinator } = options;

  api.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  api.post(
    '/v1/transfers',
    {
      schema: {
        summary: 'Submit a transfer (idempotent by id, or fire-and-forget)',
        description:
          '201 created here; 200 stored outcome of a finished transfer; 202 running on the node in `owner` (with `resumed: true` when this node took it over); 202 fire-and-forget accepted. Errors are RFC 9457 problem details with a `code`.',
        headers: z.object({ 'idempotency-key': TransferIdSchema.optional() }),
        querystring: NoQuery,
        body: TransferRequestSchema,
        // 403 PATH_NOT_ALLOWED / PATH_NOT_ACCESSIBLE, 404 UNKNOWN_ENDPOINT, 422 IDEMPOTENCY_CONFLICT /
        // UNSUPPORTED_ADDRESS_TYPE / UNKNOWN_CONNECTION, 429 QUEUE_FULL.
        response: {
          200: TransferReply,
          201: TransferReply,
          202: TransferReply,
          ...POST_PROBLEMS,
          403: ProblemSchema,
          404: ProblemSchema,
          422: ProblemSchema,
          429: ProblemSchema,
        },
      },
      validatorCompiler: transferValidator,
    },
    async (request, reply) => {
      const header = request.headers['idempotency-key'];
      if (Array.isArray(header))
        throw new ValidationError('Send one Idempotency-Key header', [
          { path: 'headers.idempotency-key', message: 'given more than once' },
        ]);
      if (header !== undefined) {
        const parsed = TransferIdSchema.safeParse(header);
        if (!parsed.success)
          throw new ValidationError(`Invalid Idempotency-Key header: ${parsed.error.issues[0]?.message}`, [
            { path: 'headers.idempotency-key', message: parsed.error.issues[0]?.message ?? 'invalid' },
          ]);
      }
      if (request.body === undefined)
        throw new ValidationError('A transfer request body is required', [
          { path: '(root)', message: 'expected a JSON object' },
        ]);
      const transfer = parseTransferRequest(request.body, header);
      const { status, body } = submissionReply(await coordinator.submit(transfer));
      return reply.code(status).send(body);
    },
  );

  api.get(
    '/v1/transfers/:id',
    {
      schema: {
        summary: 'Get a transfer record',
        params: IdParams,
        querystring: NoQuery,
        response: { 200: TransferReply, ...CONTROL_PROBLEMS, 404: ProblemSchema },
      },
    },
    async (request) => coordinator.get(request.params.id),
  );

  api.get(
    '/v1/transfers',
    {
      schema: {
        summary: 'List transfers (paginated)',
        querystring: z.strictObject({
          state: TransferStateSchema.optional(),
          owner: NameSchema.optional(),
          // Checked here, so that a cursor the store never issued is named where it was sent, as every other
          // parameter is (the store itself would refuse it at its own argument, `cursor`).
          cursor: z
            .string()
            .min(1)
            .max(1024)
            .refine(isTransferCursor, 'not a cursor of GET /v1/transfers (its "next")')
            .optional(),
          limit: z.coerce.number().int().min(1).max(options.pageSizeMax).optional(),
        }),
        response: { 200: TransferPageReply, ...CONTROL_PROBLEMS },
      },
    },
    async (request) => coordinator.list(request.query),
  );

  api.post(
    '/v1/transfers/:id/terminate',
    {
      schema: {
        summary: 'Terminate a transfer (routed to its owner)',
        description: 'Takes no body (anything but none or `{}` is 400 VALIDATION_FAILED, and stops nothing).',
        params: IdParams,
        querystring: NoQuery,
        body: NoBody,
        // 409 ILLEGAL_TRANSITION: it already finished.
        response: { 200: TransferReply, ...POST_PROBLEMS, 404: ProblemSchema, 409: ProblemSchema },
      },
    },
    async (request) => coordinator.terminate(request.params.id),
  );

  api.get(
    '/v1/endpoints',
    {
      schema: {
        summary: 'Endpoints of this host and their pipelines',
        querystring: NoQuery,
        response: { 200: EndpointListReply, ...CONTROL_PROBLEMS },
      },
    },
    async () => ({
      endpoints: await options.endpoints.status(),
    }),
  );

  api.post(
    '/v1/endpoints/:name/rebuild',
    {
      schema: {
        summary: 'Force a blue/green rebuild of an endpoint (or start a failed one again)',
        description:
          '202 `{endpoint, rebuild: "started"}`: a new generation is built while the current one serves. An endpoint whose pipeline failed to start (`phase: failed`, or `retrying` its start by itself) is started again instead: 202 `rebuild: "restarted"`, or 409 ENDPOINT_NOT_RUNNING with the new `failure` when its cause remains. Takes no body.',
        params: NameParams,
        querystring: NoQuery,
        body: NoBody,
        // 404 UNKNOWN_ENDPOINT; 409 ENDPOINT_NOT_RUNNING; 503 also ENDPOINT_STOPPED.
        response: { 202: RebuildReply, ...POST_PROBLEMS, 404: ProblemSchema, 409: ProblemSchema },
      },
    },
    async (request, reply) => {
      const rebuild = await options.endpoints.rebuild(request.params.name);
      return reply.code(202).send({ endpoint: request.params.name, rebuild });
    },
  );

  await app.register(steeringRoutes, { endpoints: options.endpoints });
  await app.register(endpointStreamRoutes, {
    endpoints: options.endpoints,
    switches: options.switches,
    metrics: options.metrics.registry,
    maxStreams: options.streams.maxStreams,
    maxStreamsPerClient: options.streams.maxStreamsPerClient,
  });
  await app.register(consoleRoutes, {
    dir: options.consoleDir === undefined ? consoleAssetsDir() : options.consoleDir,
  });

  api.get(
    '/v1/nodes',
    {
      schema: {
        summary: 'Cluster members and when they were last seen',
        querystring: NoQuery,
        response: { 200: NodeListReply, ...CONTROL_PROBLEMS },
      },
    },
    async () => ({ nodes: await options.nodes() }),
  );

  api.get('/healthz', { schema: { summary: 'Liveness: the process is up' } }, async () => ({
    status: 'ok',
    node: options.nodeId,
  }));

  api.get(
    '/readyz',
    {
      schema: {
        summary: 'Readiness: store reachable, backplane connected',
        response: { 200: ReadinessReply, 503: NotReadyResponse },
      },
    },
    async (_request, reply) => {
      const readiness = await options.readiness();
      return reply
        .code(readiness.ready ? 200 : 503)
        .send({ status: readiness.ready ? 'ready' : 'not-ready', ...readiness.checks });
    },
  );

  api.get('/metrics', { schema: { summary: 'Prometheus metrics' } }, async (_request, reply) => {
    const text = await options.metrics.registry.metrics();
    return reply.type(options.metrics.registry.contentType).send(text);
  });

  // The direct-address backplane's internal routes: its plugin defines them (paths, answers, 404 code).
  if (options.direct) await app.register(directRoutes, { backplane: options.direct });
  return app;
}
