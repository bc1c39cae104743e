import {
  asSluiceError,
  type FieldIssue,
  InvalidQueryError,
  type SluiceError,
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

/** The media type of problem-details bodies. */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  409: 'Conflict',
  410: 'Gone',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
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
  const status = error.status;
  const body: ProblemDetails = {
    type: `https://sluice.dev/problems/${error.code.toLowerCase().replaceAll('_', '-')}`,
    title: TITLES[status] ?? 'Error',
    status,
    detail: error.code === 'INTERNAL' ? 'An internal error occurred' : error.message,
    code: error.code,
  };
  if (instance !== undefined) body.instance = instance;
  if (error instanceof ValidationError || error instanceof InvalidQueryError) body.errors = error.errors;
  else if (Array.isArray((error as { errors?: unknown }).errors))
    body.errors = (error as unknown as ValidationError).errors;
  if (error.details) {
    for (const [key, value] of Object.entries(error.details)) {
      if (!(key in body)) body[key] = value;
    }
  }
  return { status, body };
}
