import { STATUS_CODES } from 'node:http';
import { describe, expect, it, vi } from 'vitest';
import { ERROR_CASES } from '../test/error-cases.js';
import {
  ConfigError,
  InvalidQueryError,
  QueueFullError,
  SluiceError,
  StaleEpochError,
  ValidationError,
} from './errors.js';
import { PROBLEM_CONTENT_TYPE, toProblem } from './problem.js';

/**
 * The expected title is the status's standard reason phrase: Node's table, with the two phrases RFC 9110 renamed
 * (Node still has the RFC 7231 names "Payload Too Large" and "Unprocessable Entity").
 */
const RFC_9110_RENAMED: Record<number, string> = { 413: 'Content Too Large', 422: 'Unprocessable Content' };
const reasonPhrase = (status: number) => RFC_9110_RENAMED[status] ?? STATUS_CODES[status];

describe('toProblem', () => {
  it('uses the RFC 9457 media type', () => {
    expect(PROBLEM_CONTENT_TYPE).toBe('application/problem+json');
  });

  it.each(ERROR_CASES.map((c) => [c.error.name, c] as const))(
    '%s maps to its status and a complete problem body',
    (_name, { error, code, status }) => {
      const problem = toProblem(error, '/v1/things/1');
      expect(problem.status).toBe(status);
      const { body } = problem;
      expect(body.type).toBe(`https://sluice.dev/problems/${code.toLowerCase().replaceAll('_', '-')}`);
      expect(body.title).toBe(reasonPhrase(status));
      expect(body.status).toBe(status);
      expect(body.detail).toBe(error.message);
      expect(body.code).toBe(code);
      expect(body.instance).toBe('/v1/things/1');
      // Details become extension members; they never override the standard ones.
      for (const [key, value] of Object.entries(error.details ?? {})) {
        if (!['type', 'title', 'status', 'detail', 'code', 'instance', 'errors'].includes(key))
          expect(body[key]).toEqual(value);
      }
      // The body is JSON: it survives a round trip unchanged.
      expect(JSON.parse(JSON.stringify(body))).toEqual(body);
    },
  );

  it('puts the failing paths of a validation error in `errors`', () => {
    const issues = [
      { path: 'source.path', message: 'must not contain NUL bytes' },
      { path: 'properties', message: 'at most 64 properties' },
    ];
    const { status, body } = toProblem(new ValidationError('Invalid transfer request', issues));
    expect(status).toBe(400);
    expect(body).toEqual({
      type: 'https://sluice.dev/problems/validation-failed',
      title: 'Bad Request',
      status: 400,
      detail: 'Invalid transfer request',
      code: 'VALIDATION_FAILED',
      errors: issues,
    });
  });

  it('puts the failing paths of an invalid query and of a config error in `errors`', () => {
    const q = toProblem(new InvalidQueryError('bad', [{ path: '$filter.a.$in', message: 'at most 1000' }]));
    expect(q.body.errors).toEqual([{ path: '$filter.a.$in', message: 'at most 1000' }]);
    const c = toProblem(new ConfigError('bad', [{ path: 'endpoints[0].primaryKey', message: 'required' }]));
    expect(c.body.errors).toEqual([{ path: 'endpoints[0].primaryKey', message: 'required' }]);
    expect(c.status).toBe(500);
  });

  it('omits `instance` and `errors` when there are none', () => {
    const { body } = toProblem(new QueueFullError(5));
    expect(body).toEqual({
      type: 'https://sluice.dev/problems/queue-full',
      title: 'Too Many Requests',
      status: 429,
      detail: 'This node is at its transfer capacity; retry later',
      code: 'QUEUE_FULL',
      retryAfterSeconds: 5,
    });
    expect('instance' in body).toBe(false);
    expect('errors' in body).toBe(false);
  });

  it('hides the message of unexpected errors', () => {
    const { status, body } = toProblem(new Error('password=hunter2 at db.internal:5432'), '/v1/transfers');
    expect(status).toBe(500);
    expect(body).toEqual({
      type: 'https://sluice.dev/problems/internal',
      title: 'Internal Server Error',
      status: 500,
      detail: 'An internal error occurred',
      code: 'INTERNAL',
      instance: '/v1/transfers',
    });
    expect(toProblem('thrown string').body.detail).toBe('An internal error occurred');
    expect(toProblem(undefined).status).toBe(500);
  });

  it('never lets details override the standard members or reach the prototype', () => {
    const err = new SluiceError({
      code: 'QUEUE_FULL',
      message: 'full',
      details: JSON.parse(
        '{"status": 200, "code": "OK", "type": "x", "__proto__": {"polluted": true}, "n": 1}',
      ),
    });
    const { body } = toProblem(err);
    expect(body.status).toBe(429);
    expect(body.code).toBe('QUEUE_FULL');
    expect(body.type).toBe('https://sluice.dev/problems/queue-full');
    expect(body.n).toBe(1);
    expect(Object.getPrototypeOf(body)).toBe(Object.prototype);
    expect((body as Record<string, unknown>).polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('maps an error from a second copy of the package, including its `errors`', async () => {
    vi.resetModules();
    const copy = await import('./errors.js');
    const foreign = new copy.ValidationError('Invalid', [{ path: 'id', message: 'required' }]);
    expect(foreign).not.toBeInstanceOf(ValidationError);
    const { status, body } = toProblem(foreign);
    expect(status).toBe(400);
    expect(body.code).toBe('VALIDATION_FAILED');
    expect(body.errors).toEqual([{ path: 'id', message: 'required' }]);

    const stale = toProblem(new copy.StaleEpochError('t-1', 3));
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({ code: 'STALE_EPOCH', id: 't-1', expectedEpoch: 3 });
    expect(stale.body).toEqual(toProblem(new StaleEpochError('t-1', 3)).body);
  });

  it('maps a plain object carrying the brand, and never throws on a malformed one', () => {
    const brand = Symbol.for('sluice.error');
    const plain = { [brand]: true, code: 'QUEUE_FULL', status: 429, message: 'full', details: { a: 1 } };
    expect(toProblem(plain)).toEqual({
      status: 429,
      body: {
        type: 'https://sluice.dev/problems/queue-full',
        title: 'Too Many Requests',
        status: 429,
        detail: 'full',
        code: 'QUEUE_FULL',
        a: 1,
      },
    });
    for (const malformed of [
      { [brand]: true },
      { [brand]: true, code: 42, status: 'x' },
      { [brand]: true, code: 'not a code', status: 200, details: 'abc' },
      { [brand]: true, code: 'QUEUE_FULL', status: 1e9, message: { toString: 1 } },
    ]) {
      const { status, body } = toProblem(malformed);
      expect(status).toBe(500);
      expect(body.status).toBe(500);
      expect(body.title).toBe('Internal Server Error');
      expect(typeof body.detail).toBe('string');
      expect(Object.keys(body)).not.toContain('0');
    }
  });
});
