import {
  EndpointPhase,
  EVERY_ROUTE_PROBLEMS,
  LagUnit,
  PROBLEM_RESPONSE,
  ServingFollowerPhase,
} from '@sluice/core';
import { z } from 'zod';

/**
 * The responses of the control API as its OpenAPI document (`/docs/json`) declares them, so that a client generated
 * from it knows every status a route answers. Documentation only: the control API serializes every reply with plain
 * `JSON.stringify` (server.ts), so a schema here never drops or reorders a member — a problem's extra members
 * (`failure`, `allow`, `retryAfterSeconds`, …) and a record's fields go out as the handler built them.
 */

/**
 * A reply's schema for the document only: its type stays `unknown`, as a route without one had it — the handlers
 * return core's view interfaces, which a loose object's index signature would not accept.
 */
function documented(schema: z.ZodType): z.ZodType<unknown> {
  return schema;
}

/** A problem response (`application/problem+json`), as core defines it (one declaration for both apps' documents). */
export const ProblemSchema = PROBLEM_RESPONSE;

/**
 * What every control route can answer besides its own: 400 (a query-string parameter it does not take, a body or
 * path parameter that fails its schema), 401 (control auth), 500 (INTERNAL), 503 (NODE_SHUTTING_DOWN while the node
 * closes, STORE_UNAVAILABLE, BACKPLANE_UNAVAILABLE).
 *
 * @example
 * ```ts
 * api.get('/v1/nodes', { schema: { response: { 200: NodeListReply, ...CONTROL_PROBLEMS } } }, handler);
 * ```
 */
export const CONTROL_PROBLEMS = EVERY_ROUTE_PROBLEMS;

/**
 * A POST route's, over {@link CONTROL_PROBLEMS}: 413 (PAYLOAD_TOO_LARGE: over `http.bodyBytes`) and 415
 * (UNSUPPORTED_MEDIA_TYPE: a body that is not JSON), refused before the route runs.
 *
 * @example
 * ```ts
 * api.post('/v1/endpoints/:name/promote', { schema: { response: { 200: SwitchReply, ...POST_PROBLEMS, 404: ProblemSchema } } }, handler);
 * ```
 */
export const POST_PROBLEMS = { ...CONTROL_PROBLEMS, 413: ProblemSchema, 415: ProblemSchema } as const;

/** A transfer as `GET /v1/transfers/:id` shows it (and the submit route answers with it). */
export const TransferReply = documented(
  z
    .looseObject({
      id: z.string(),
      finishing: z
        .boolean()
        .optional()
        .describe(
          'true while the owner has passed its fenced finishing step at the current epoch (publishing what cannot be taken back) and the record is not final: a terminate or takeover then waits for its lease. Absent from a fire-and-forget acceptance',
        ),
    })
    .describe(
      'The transfer record: id, state, request, owner, epoch, result or error, progress while it runs; a fire-and-forget acceptance is `{id, mode: "fire-and-forget", accepted: true, owner}`',
    ),
);

/** A page of `GET /v1/transfers`. */
export const TransferPageReply = documented(
  z.looseObject({
    records: z.array(TransferReply),
    next: z.string().nullable().describe('`cursor` of the next page; null on the last'),
  }),
);

/** A retry (core's `RetryView`): failed attempts in a row and when the next is due. Described where it is used. */
const RetryReply = z.object({
  attempts: z.number().int().describe('Failed attempts in a row'),
  nextAttemptAt: z
    .string()
    .nullable()
    .describe('When the next attempt is due (ISO 8601); null while one is under way'),
});

/** A run's wait for its replication slot (core's `SlotWaitView`). Described where it is used. */
const SlotWaitReply = z.object({
  slot: z.string(),
  since: z.string().describe('When the wait began (ISO 8601)'),
  until: z.string().describe('When it gives up and fails, to be retried (ISO 8601)'),
  activePid: z.number().int().nullable().describe('The PostgreSQL backend streaming the slot, as last seen'),
});

/** The serving generation's follower (core's `ServingFollowerStatus`), or null when nothing follows it. */
const ServingFollowerReply = z
  .object({
    cache: z.string().describe('The serving generation it follows (or tries to, or stands for)'),
    phase: z.enum(ServingFollowerPhase),
    reason: z
      .string()
      .nullable()
      .describe(
        'Why it stands (`standing`), why its last run failed (`retrying`) or which switch it waits for (`paused`); null otherwise',
      ),
    error: z
      .object({ code: z.string(), message: z.string() })
      .nullable()
      .describe('The failure it retries after, with its stable code (`retrying`); null otherwise'),
    recordsWritten: z.number().int(),
    lastCommit: z
      .object({ lsn: z.string(), at: z.string() })
      .nullable()
      .describe('Its last commit into the serving generation (LSN, ISO 8601 time); null before its first'),
    retry: RetryReply.nullable().describe(
      'From a failed run (or start) until it follows again: the failed attempts in a row and when it tries again, as the endpoint’s `retry`; null otherwise',
    ),
    slotWait: SlotWaitReply.nullable().describe(
      'While its run waits for its replication slot because another process streams it (nothing is followed meanwhile: `phase` is `retrying` when the wait is the attempt under way after failed ones, else `starting`); null otherwise',
    ),
  })
  .nullable()
  .describe(
    'While the run feeds a generation the alias does not point at (a green building or held), the follower that keeps the serving generation following its replication source through its own slot (docs/generations.md); null otherwise',
  );

/** `GET /v1/endpoints`. */
export const EndpointListReply = documented(
  z.looseObject({
    endpoints: z
      .array(
        z.looseObject({
          name: z.string(),
          phase: z
            .enum(EndpointPhase)
            .describe(
              '`retrying`: an outage Sluice waits out by itself (see `retry`); `failed`: its pipeline could not start for a reason that will not pass by itself — fix it, then rebuild',
            ),
          lag: z
            .number()
            .nullable()
            .describe('How far the run is behind its source, in `lagUnit`; null when the source cannot tell'),
          lagUnit: z
            .enum(LagUnit)
            .nullable()
            .describe(
              'What `lag` counts: `bytes` of the source file not yet read (a file source), `messages` of the stream not yet read (JetStream); null for a PostgreSQL source, which reports no `lag` (a replication source’s lag is in `replication`)',
            ),
          error: z
            .object({ code: z.string(), message: z.string() })
            .nullable()
            .describe('Why it is `retrying` or `failed`; null otherwise'),
          retry: RetryReply.nullable().describe(
            'While `phase` is `retrying` (a start or run failed for a reason that may pass; `error` says which): Sluice tries again by itself; null otherwise',
          ),
          slotWait: SlotWaitReply.nullable().describe(
            'While the run waits for its replication slot because another process streams it (nothing streams meanwhile: `phase` is `retrying` when the wait is the attempt under way after failed ones, else `starting`); null otherwise',
          ),
          follower: ServingFollowerReply,
        }),
      )
      .describe(
        'Each endpoint of this host: phase, serving / building / held generation, records, lag, error',
      ),
  }),
);

/** `POST /v1/endpoints/:name/rebuild`. */
export const RebuildReply = documented(
  z.looseObject({
    endpoint: z.string(),
    rebuild: z.enum(['started', 'restarted']),
  }),
);

/** `GET /v1/endpoints/:name/generations`. */
export const GenerationsReply = documented(
  z.looseObject({
    generations: z.array(z.looseObject({ name: z.string() })),
    history: z.array(z.looseObject({})),
  }),
);

/** A promote's or rollback's move. */
export const SwitchReply = documented(
  z.looseObject({
    endpoint: z.string(),
    from: z.string().nullable(),
    to: z.string(),
    cause: z.enum(['promote', 'rollback']),
    changed: z.boolean().describe('false when the same move was repeated'),
  }),
);

/** `GET /v1/endpoints/stream`'s 200: an event stream, documented by content type. */
export const EndpointStreamResponse = {
  description:
    'Server-Sent Events: `retry`, then `endpoints` on connect and on every change, `switch` on every alias switch, heartbeat comments',
  content: { 'text/event-stream': { schema: z.string() } },
} as const;

/** `GET /v1/nodes`. */
export const NodeListReply = documented(
  z.looseObject({ nodes: z.array(z.looseObject({ nodeId: z.string() })) }),
);

/** `GET /readyz`, ready (200) or not (503). */
export const ReadinessReply = documented(
  z.looseObject({
    status: z.enum(['ready', 'not-ready']),
  }),
);

/**
 * `GET /readyz`'s 503: the readiness body when the store or the backplane is down, or a `NODE_SHUTTING_DOWN` problem
 * once the node closes (every route's 503) — each under its own media type.
 */
export const NotReadyResponse = {
  description: 'Not ready (application/json), or the node is shutting down (application/problem+json)',
  content: {
    'application/json': { schema: ReadinessReply },
    ...PROBLEM_RESPONSE.content,
  },
} as const;
