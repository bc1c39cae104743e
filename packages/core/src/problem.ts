import { z } from 'zod';
import {
  asSluiceError,
  type FieldIssue,
  InvalidQueryError,
  type SluiceError,
  statusOf,
  ValidationError,
} from './errors.js';

/** An RFC 9457 problem-details body, extended with Sluice's stable `code`. */
export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  instance?: string;
  errors?: FieldIssue[];
  [extension: string]: unknown;
}

/**
 * {@link ProblemDetails} as a schema, for the apps' OpenAPI documents (both declare every problem status a route
 * answers with it, as a {@link PROBLEM_RESPONSE}). Loose: an error's details follow as further members (`failure`, `retryAfterSeconds`, …).
 *
 * @example
 * ```ts
 * const problem = ProblemDetailsSchema.parse(await response.json());
 * ```
 */
export const ProblemDetailsSchema = z
  .looseObject({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    code: z.string(),
    instance: z.string().optional(),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  .describe('RFC 9457 problem details (application/problem+json) with a stable `code`');

/** The media type of problem-details bodies. */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/**
 * A problem response as the apps' OpenAPI documents declare it: {@link ProblemDetailsSchema} under
 * `application/problem+json`, the media type every error is sent with. A bare schema in a route's `response` is
 * documented as `application/json`, so a client generated from the document expected another media type than it got.
 *
 * @example
 * ```ts
 * app.get('/v1/nodes', { schema: { response: { 200: NodesSchema, 404: PROBLEM_RESPONSE } } }, handler);
 * ```
 */
export const PROBLEM_RESPONSE = {
  description: 'RFC 9457 problem details with a stable `code`',
  content: { [PROBLEM_CONTENT_TYPE]: { schema: ProblemDetailsSchema } },
} as const;

/**
 * The problem statuses every route of either app can answer, for their OpenAPI documents: 400 (a parameter, header
 * or body that fails its check), 401 (auth), 500 (INTERNAL), 503 (shutting down, a dependency unavailable), each a
 * {@link PROBLEM_RESPONSE}.
 *
 * @example
 * ```ts
 * app.get('/v1/nodes', { schema: { response: { 200: NodesSchema, ...EVERY_ROUTE_PROBLEMS } } }, handler);
 * ```
 */
export const EVERY_ROUTE_PROBLEMS = {
  400: PROBLEM_RESPONSE,
  401: PROBLEM_RESPONSE,
  500: PROBLEM_RESPONSE,
  503: PROBLEM_RESPONSE,
} as const;

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  409: 'Conflict',
  410: 'Gone',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
  507: 'Insufficient Storage',
};

/**
 * Maps any error to an HTTP status and an RFC 9457 body. Internal errors keep their message out of the body.
 *
 * @example
 * ```ts
 * const { status, body } = toProblem(err, '/v1/transfers');
 * reply.code(status).type(PROBLEM_CONTENT_TYPE).send(body);
 * ```
 */
export function toProblem(err: unknown, instance?: string): { status: number; body: ProblemDetails } {
  const error: SluiceError = asSluiceError(err);
  // A branded error may come from another copy of this package or be a plain object carrying the brand;
  // read its fields defensively so mapping an error never throws.
  const code =
    typeof error.code === 'string' && /^[A-Z][A-Z0-9_]{0,63}$/.test(error.code) ? error.code : 'INTERNAL';
  // The status the code maps to (a branded value from elsewhere: the status it carries, when valid).
  const status = statusOf(error);
  const body: ProblemDetails = {
    type: `https://sluice.dev/problems/${code.toLowerCase().replaceAll('_', '-')}`,
    title: TITLES[status] ?? 'Error',
    status,
    detail:
      code === 'INTERNAL' || typeof error.message !== 'string' ? 'An internal error occurred' : error.message,
    code,
  };
  if (instance !== undefined) body.instance = instance;
  if (error instanceof ValidationError || error instanceof InvalidQueryError) body.errors = error.errors;
  else if (Array.isArray((error as { errors?: unknown }).errors))
    body.errors = (error as unknown as ValidationError).errors;
  const details: unknown = error.details;
  if (typeof details === 'object' && details !== null && !Array.isArray(details)) {
    for (const [key, value] of Object.entries(details)) {
      // Never let details override the standard members (nor reach the prototype through "__proto__").
      if (!(key in body)) body[key] = value;
    }
  }
  return { status, body };
}
