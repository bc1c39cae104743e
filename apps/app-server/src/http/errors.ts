import {
  ErrorCode,
  type FieldIssue,
  MalformedJsonError,
  PayloadTooLargeError,
  SluiceError,
  UnsupportedMediaTypeError,
  ValidationError,
} from '@sluice/core';

interface FastifyLikeError {
  code?: string;
  statusCode?: number;
  message?: string;
  validation?: Array<{ instancePath?: string; message?: string }>;
  validationContext?: string;
}

/** `/a/0/b` (JSON pointer from a validator) → `a[0].b`, prefixed with the request part. */
function pointerToPath(pointer: string | undefined, context: string | undefined): string {
  const segments = (pointer ?? '').split('/').filter((s) => s !== '');
  let out = context && context !== 'body' ? context : '';
  for (const segment of segments) {
    if (/^\d+$/.test(segment)) out += `[${segment}]`;
    else out += out === '' ? segment : `.${segment}`;
  }
  return out === '' ? '(root)' : out;
}

/**
 * Turns errors raised by fastify itself (content type, body size, JSON syntax, schema validation) into
 * Sluice's typed errors, so every error leaves as an RFC 9457 body with a stable code.
 */
export function normalizeHttpError(
  err: unknown,
  context: { contentType: string | undefined; bodyLimit: number },
): unknown {
  if (SluiceError.isInstance(err)) return err;
  const error = err as FastifyLikeError;
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new UnsupportedMediaTypeError(context.contentType?.slice(0, 128));
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new PayloadTooLargeError(context.bodyLimit);
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new MalformedJsonError('The body is empty; send a JSON object');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new MalformedJsonError(error.message ?? 'The body is not valid JSON');
  }
  if (Array.isArray(error.validation)) {
    const issues: FieldIssue[] = error.validation.map((item) => ({
      path: pointerToPath(item.instancePath, error.validationContext),
      message: item.message ?? 'invalid',
    }));
    const first = issues[0];
    return new ValidationError(
      `Invalid ${error.validationContext ?? 'request'}${first ? `: ${first.path}: ${first.message}` : ''}`,
      issues,
    );
  }
  if (err instanceof SyntaxError) return new MalformedJsonError(err.message);
  if (typeof error.statusCode === 'number' && error.statusCode >= 400 && error.statusCode < 500)
    return new SluiceError({
      code: error.statusCode === 404 ? ErrorCode.NOT_FOUND : ErrorCode.VALIDATION_FAILED,
      message: error.message ?? 'Bad request',
    });
  return err;
}
