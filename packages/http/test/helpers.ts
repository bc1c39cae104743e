import { Writable } from 'node:stream';
import { QueueFullError, ShuttingDownError, UnauthorizedError, ValidationError } from '@sluice/core';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import { createLogger } from '../src/logger.js';
import { problemClientErrors, problemDetailsPlugin, problemFrameworkErrors } from '../src/problem-details.js';

/** The longest path parameter the test application's router accepts. */
export const MAX_PARAM_LENGTH = 64;

/** The JSON body limit of the test application. */
export const BODY_LIMIT = 2048;

/** A destination that keeps every JSON line written to it, parsed. */
export function captureLines() {
  const lines: Array<Record<string, unknown>> = [];
  const destination = new Writable({
    write(chunk, _encoding, callback) {
      for (const line of String(chunk).split('\n')) if (line !== '') lines.push(JSON.parse(line));
      callback();
    },
  });
  return { lines, destination };
}

/** Log lines captured from a logger made by `createLogger`. */
export function capturedLogger() {
  const { lines, destination } = captureLines();
  return { lines, logger: createLogger({ service: 'http-test', level: 'info', destination }) };
}

/**
 * A fastify application shaped like the apps: the plugin on the root, then routes on the root and inside an
 * encapsulated child plugin, each failing in one of the ways the apps fail.
 */
export async function buildTestApp(): Promise<{
  app: FastifyInstance;
  logs: Array<Record<string, unknown>>;
}> {
  const { lines, logger } = capturedLogger();
  const app = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    forceCloseConnections: 'idle',
    return503OnClosing: false,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: problemFrameworkErrors({ bodyLimit: BODY_LIMIT, maxParamLength: MAX_PARAM_LENGTH }),
    clientErrorHandler: problemClientErrors,
  });
  await app.register(problemDetailsPlugin, { bodyLimit: BODY_LIMIT });
  app.post('/echo', async (request) => ({
    body: request.body ?? null,
    ownProto: Object.hasOwn((request.body ?? {}) as object, '__proto__'),
  }));
  app.get(
    '/items',
    { schema: { querystring: { type: 'object', properties: { limit: { type: 'integer', maximum: 10 } } } } },
    async (request) => ({ query: request.query }),
  );
  app.get('/private', async () => {
    throw new UnauthorizedError();
  });
  app.get('/busy', async () => {
    throw new QueueFullError(7);
  });
  app.get('/stopping', async () => {
    throw new ShuttingDownError();
  });
  app.get<{ Params: { id: string } }>('/things/:id', async (request) => ({ id: request.params.id }));
  app.get('/slow', async () => {
    await new Promise((resolve) => setTimeout(resolve, 300));
    return { slow: true };
  });
  app.get('/bug', async () => {
    throw new Error('password=hunter2 leaked in a message');
  });
  app.get('/invalid', async () => {
    throw new ValidationError('Invalid thing: a.b: bad', [{ path: 'a.b', message: 'bad' }]);
  });
  await app.register(async (scoped) => {
    scoped.get('/scoped/private', async () => {
      throw new UnauthorizedError('The bearer token is not valid');
    });
    scoped.post('/scoped/echo', async (request) => ({ body: request.body }));
  });
  return { app, logs: lines };
}
