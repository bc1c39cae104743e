import type { OwnerReport } from '@sluice/core';
import { NotFoundError, PROBLEM_CONTENT_TYPE, SluiceError, toProblem } from '@sluice/core';
import type { FastifyPluginAsync, FastifyReply, FastifySchema } from 'fastify';
import { OWNER_ROUTE, TERMINATE_ROUTE } from './routes.js';
import type { DirectRoutesTarget } from './routes-target.js';

export interface DirectRoutesOptions {
  backplane: DirectRoutesTarget;
}

/** Read by `@fastify/swagger` when the host has it: the internal routes stay out of its OpenAPI document. */
const HIDDEN = { hide: true } as FastifySchema;

function notRunning(reply: FastifyReply, transferId: string, url: string) {
  const { status, body } = toProblem(
    new NotFoundError(`Transfer "${transferId}" is not running on this node`),
    url.split('?')[0],
  );
  return reply.code(status).type(PROBLEM_CONTENT_TYPE).send(body);
}

/** A typed refusal (a bad id) is answered here as a problem; anything else is the host's error to report. */
function refused(reply: FastifyReply, err: unknown, url: string) {
  if (!SluiceError.isInstance(err)) throw err;
  const { status, body } = toProblem(err, url.split('?')[0]);
  return reply.code(status).type(PROBLEM_CONTENT_TYPE).send(body);
}

/**
 * The direct-address backplane's two internal routes as a fastify plugin: what a node serves so that its peers'
 * {@link DirectBackplane} can ask it "do you run X?" and "stop X". The host decides what runs around them
 * (authentication hooks, its not-found handler); the answers — 200 bodies, `404 NOT_FOUND` problems for a
 * transfer not running here, `400 VALIDATION_FAILED` for a bad id — are defined here only.
 *
 * @example
 * ```ts
 * const backplane = createDirectBackplane({ nodeId: 'n1' });
 * await app.register(directRoutes, { backplane });
 * ```
 */
export const directRoutes: FastifyPluginAsync<DirectRoutesOptions> = async (app, { backplane }) => {
  app.get<{ Params: { id: string } }>(OWNER_ROUTE, { schema: HIDDEN }, async (request, reply) => {
    let report: OwnerReport | null;
    try {
      report = backplane.handleOwnerQuery(request.params.id);
    } catch (err) {
      return refused(reply, err, request.url);
    }
    if (report === null) return notRunning(reply, request.params.id, request.url);
    return reply.send(report);
  });

  app.post<{ Params: { id: string } }>(TERMINATE_ROUTE, { schema: HIDDEN }, async (request, reply) => {
    let stopped: boolean;
    try {
      stopped = await backplane.handleTerminate(request.params.id);
    } catch (err) {
      return refused(reply, err, request.url);
    }
    if (!stopped) return notRunning(reply, request.params.id, request.url);
    return reply.send({ terminated: true, by: backplane.nodeId });
  });
};
