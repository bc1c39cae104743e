import {
  asSluiceError,
  type FieldIssue,
  ForbiddenError,
  MalformedJsonError,
  NotFoundError,
  PayloadTooLargeError,
  SluiceError,
  UnauthorizedError,
  UnsupportedMediaTypeError,
  ValidationError,
} from '@sluice/core';

/** What the normalizer needs to know about the request whose handling failed. */
export interface NormalizeContext {
  /** The request's `content-type` header (named in a 415). */
  contentType: string | undefined;
  /** The JSON body limit in bytes (named in a 413). */
  bodyLimit: number;
  /** The router's longest path parameter, in characters (named when a path exceeds it). */
  maxParamLength?: number;
}

/** A 400 about the request path; the path itself is the problem's `instance`, never repeated in its detail. */
function invalidPath(message: string): ValidationError {
  return new ValidationError(`Invalid path: ${message}`, [{ path: '(path)', message }]);
}

/** One failure of a schema validator, as fastify hands it over (ajv's shape; zod's through its type provider). */
interface ValidationItem {
  instancePath?: string;
  message?: string;
  /** The failed rule: zod's issue code (`unrecognized_keys`) through fastify-type-provider-zod. */
  keyword?: string;
  params?: { keys?: unknown };
}

/** Longest unknown key echoed in a path (a query string may carry a huge one). */
const MAX_KEY_CHARS = 128;

/** The fields fastify (and plugins such as `@fastify/jwt`) put on the errors they raise. */
interface FrameworkError {
  code?: unknown;
  statusCode?: unknown;
  message?: unknown;
  validation?: ValidationItem[];
  validationContext?: string;
}

/**
 * The message the empty-body error carries, from the parser and from fastify's own check alike.
 *
 * @example
 * ```ts
 * expect(problem.detail).toBe(EMPTY_BODY_MESSAGE);
 * ```
 */
export const EMPTY_BODY_MESSAGE = 'The body is empty; send a JSON object (or no Content-Type at all)';

/** `/a/0/b` (a validator's JSON pointer) → `a[0].b`, prefixed with the request part unless it is the body. */
function pointerToPath(pointer: string | undefined, context: string | undefined): string {
  const segments = (pointer ?? '').split('/').filter((segment) => segment !== '');
  let out = context && context !== 'body' ? context : '';
  for (const segment of segments) {
    if (/^\d+$/.test(segment)) out += `[${segment}]`;
    else out += out === '' ? segment : `.${segment}`;
  }
  return out === '' ? '(root)' : out;
}

/**
 * The issues of one validation failure: an object with unknown keys (a strict zod schema) is one issue per key at
 * that key's own path — `querystring.foo`, as core's `issuesOf` reports a body's — rather than one at the object.
 */
function issuesOfItem(item: ValidationItem, context: string | undefined): FieldIssue[] {
  const at = pointerToPath(item.instancePath, context);
  const keys = item.keyword === 'unrecognized_keys' ? item.params?.keys : undefined;
  if (Array.isArray(keys) && keys.length > 0)
    return keys.map((key) => {
      const text = String(key);
      const name = text.length > MAX_KEY_CHARS ? `${text.slice(0, MAX_KEY_CHARS)}…` : text;
      return {
        path: at === '(root)' ? name : `${at}.${name}`,
        message: `Unrecognized key: ${JSON.stringify(name)}`,
      };
    });
  return [{ path: at, message: item.message ?? 'invalid' }];
}

function textOf(value: unknown, fallback: string): string {
  return typeof value === 'string' && value !== '' ? value : fallback;
}

/**
 * Turns any error a route, hook or fastify itself raised into a {@link SluiceError}, so every failure leaves as
 * an RFC 9457 body with a stable code: Sluice errors pass through; fastify's body errors (media type, size,
 * JSON syntax, content length) and schema validation become their typed errors; any other client error
 * (a 4xx `statusCode`) becomes the typed error of its status; everything else is `INTERNAL`, its message kept
 * out of the body by core's `toProblem`.
 *
 * @example
 * ```ts
 * const error = normalizeHttpError(err, { contentType: request.headers['content-type'], bodyLimit: 1 << 20 });
 * const { status, body } = toProblem(error, '/v1/transfers');
 * ```
 */
export function normalizeHttpError(err: unknown, context: NormalizeContext): SluiceError {
  if (SluiceError.isInstance(err)) return err;
  const error = (typeof err === 'object' && err !== null ? err : {}) as FrameworkError;
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new UnsupportedMediaTypeError(context.contentType?.slice(0, 128));
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new PayloadTooLargeError(context.bodyLimit);
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new MalformedJsonError(EMPTY_BODY_MESSAGE);
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new MalformedJsonError(textOf(error.message, 'The body is not valid JSON'));
    // The router's own refusals (through `problemFrameworkErrors`); their messages quote the whole path.
    case 'FST_ERR_BAD_URL':
      return invalidPath('a percent-encoded character is malformed');
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return invalidPath(
        context.maxParamLength === undefined
          ? 'a path parameter is longer than the router accepts'
          : `a path parameter is longer than ${context.maxParamLength} characters`,
      );
  }
  if (Array.isArray(error.validation)) {
    const issues = error.validation.flatMap((item) => issuesOfItem(item, error.validationContext));
    const first = issues[0];
    return new ValidationError(
      `Invalid ${error.validationContext ?? 'request'}${first ? `: ${first.path}: ${first.message}` : ''}`,
      issues,
    );
  }
  const status = error.statusCode;
  // Only a SyntaxError fastify marked as the client's (400) is the body's fault; one thrown by a handler is a bug.
  if (err instanceof SyntaxError && status === 400)
    return new MalformedJsonError(`The body is not valid JSON: ${err.message}`);
  if (typeof status === 'number' && status >= 400 && status < 500) {
    const message = textOf(error.message, 'Bad request');
    switch (status) {
      case 401:
        return new UnauthorizedError(message);
      case 403:
        return new ForbiddenError(message);
      case 404:
        return new NotFoundError(message);
      case 413:
        return new PayloadTooLargeError(context.bodyLimit);
      case 415:
        return new UnsupportedMediaTypeError(context.contentType?.slice(0, 128));
      default:
        return new ValidationError(message, [{ path: '(request)', message }]);
    }
  }
  return asSluiceError(err);
}
