import { NameSchema } from '@sluice/core';
import type { FastifyInstance } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { EndpointManager } from '../endpoints.js';
import {
  CONTROL_PROBLEMS,
  GenerationsReply,
  POST_PROBLEMS,
  ProblemSchema,
  SwitchReply,
} from './control-responses.js';
import { NoQuery } from './no-query.js';

const NameParams = z.object({ name: NameSchema });

/**
 * A rollback may name the retained generation to go back to; without one (or without a body), the generation that
 * served before. It may name the generation the operator saw serving (`from`, the console does): the rollback is
 * made from that one only, so a page behind the server (another operator switched meanwhile) is refused rather than
 * rolling back from a generation it never showed. `nullish`: fastify validates an absent body as `null` — a body
 * sent as `null` is refused before validation (the control API's `refuseNullBody` hook), so here `null` only ever
 * means "no body".
 */
const RollbackBody = z
  .strictObject({ to: NameSchema.max(512).optional(), from: NameSchema.max(512).optional() })
  .nullish();

/**
 * A promote may name the generation the operator saw held (the console does): only that one is promoted, so one
 * superseded by another operator's rebuild while the confirmation was open is refused rather than the newer one
 * switched to. Without one (or without a body), whatever is held.
 */
const PromoteBody = z.strictObject({ generation: NameSchema.max(512).optional() }).nullish();

/**
 * The routes an operator steers generations by: the generation list with the alias history, promote and
 * rollback. Registered inside the control API, so they are authorized like the rest of it.
 *
 * @example
 * ```ts
 * await app.register(steeringRoutes, { endpoints });
 * ```
 */
export async function steeringRoutes(
  app: FastifyInstance,
  options: { endpoints: EndpointManager },
): Promise<void> {
  const api = app.withTypeProvider<ZodTypeProvider>();
  const { endpoints } = options;

  api.get(
    '/v1/endpoints/:name/generations',
    {
      schema: {
        summary: 'Retained generations of an endpoint (newest first) and its alias history',
        description:
          '`generations`: name, state (serving | building | held | retired), createdAt, snapshotDoneAt, switchedAt, retiredAt, records, checkpoint, decision, reason, cause. `history`: each switch of the alias (from, to, at, cause, version), newest first.',
        params: NameParams,
        querystring: NoQuery,
        response: { 200: GenerationsReply, ...CONTROL_PROBLEMS, 404: ProblemSchema },
      },
    },
    async (request) => endpoints.generations(request.params.name),
  );

  api.post(
    '/v1/endpoints/:name/promote',
    {
      schema: {
        summary: 'Switch the alias to the held generation',
        description:
          '200 with the move (`changed: false` when the last promote is repeated); 409 NOTHING_TO_PROMOTE when no generation is held; 409 GENERATION_NOT_HELD (nothing moves) when the body names a generation that is not the held one — its problem names the one held now as `held` (null: none); 504 ENDPOINT_TIMEOUT (nothing moves) when the held generation did not catch up with the position the serving one last committed within the hand-over wait (`switch.handoverWaitMs` of the endpoint, default 10 s) — its problem names both positions, `committed` and `target`. Optional body `{ "generation": "<generation>" }`: promote that one only; without it, the held generation.',
        params: NameParams,
        querystring: NoQuery,
        body: PromoteBody,
        // 404 UNKNOWN_ENDPOINT; 409 NOTHING_TO_PROMOTE, GENERATION_NOT_HELD, ENDPOINT_NOT_RUNNING; 503 also
        // ENDPOINT_STOPPED; 504
        // ENDPOINT_TIMEOUT (the hand-over did not happen in time).
        response: {
          200: SwitchReply,
          ...POST_PROBLEMS,
          404: ProblemSchema,
          409: ProblemSchema,
          504: ProblemSchema,
        },
      },
    },
    async (request) => endpoints.promote(request.params.name, request.body?.generation),
  );

  api.post(
    '/v1/endpoints/:name/rollback',
    {
      schema: {
        summary:
          'Point the alias back at the previous retained generation and continue it from its checkpoint',
        description:
          '200 with the move (`changed: false` when repeated); 409 CANNOT_RESUME (nothing changes) when its source cannot resume from that generation; 409 NOTHING_TO_ROLL_BACK when no earlier generation is retained; 409 GENERATION_NOT_SERVING (nothing moves) when the body names as `from` a generation that does not serve now — its problem names the one serving now as `serving`. Optional body `{ "to": "<generation>", "from": "<generation>" }`: roll back to `to` (default: the generation that served before), only while `from` serves.',
        params: NameParams,
        querystring: NoQuery,
        body: RollbackBody,
        // 404 UNKNOWN_ENDPOINT; 409 NOTHING_TO_ROLL_BACK, CANNOT_RESUME, GENERATION_NOT_SERVING, ENDPOINT_NOT_RUNNING; 503 also
        // ENDPOINT_STOPPED.
        response: { 200: SwitchReply, ...POST_PROBLEMS, 404: ProblemSchema, 409: ProblemSchema },
      },
    },
    async (request) => endpoints.rollback(request.params.name, request.body?.to, request.body?.from),
  );
}
