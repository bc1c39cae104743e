import { QueueFullError, SluiceError, toProblem } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { EMPTY_BODY_MESSAGE, normalizeHttpError } from './normalize.js';

const context = { contentType: 'text/plain; charset=utf-8', bodyLimit: 4096 };
const fastifyError = (fields: Record<string, unknown>) =>
  Object.assign(new Error(String(fields.message ?? '')), fields);
const problemOf = (err: unknown) => toProblem(normalizeHttpError(err, context));

describe('normalizeHttpError', () => {
  it('passes Sluice errors through untouched', () => {
    const error = new QueueFullError(3);
    expect(normalizeHttpError(error, context)).toBe(error);
  });

  it("maps fastify's body errors to their typed errors", () => {
    const media = problemOf(fastifyError({ code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE', statusCode: 415 }));
    expect(media).toMatchObject({ status: 415, body: { code: 'UNSUPPORTED_MEDIA_TYPE' } });
    expect(media.body.detail).toContain('text/plain; charset=utf-8');
    const large = problemOf(fastifyError({ code: 'FST_ERR_CTP_BODY_TOO_LARGE', statusCode: 413 }));
    expect(large).toMatchObject({ status: 413, body: { code: 'PAYLOAD_TOO_LARGE', limitBytes: 4096 } });
    const empty = problemOf(fastifyError({ code: 'FST_ERR_CTP_EMPTY_JSON_BODY', statusCode: 400 }));
    expect(empty).toMatchObject({
      status: 400,
      body: { code: 'MALFORMED_JSON', detail: EMPTY_BODY_MESSAGE },
    });
    const length = problemOf(
      fastifyError({
        code: 'FST_ERR_CTP_INVALID_CONTENT_LENGTH',
        statusCode: 400,
        message: 'length mismatch',
      }),
    );
    expect(length).toMatchObject({
      status: 400,
      body: { code: 'MALFORMED_JSON', detail: 'length mismatch' },
    });
  });

  it('clips a huge content type named in a 415', () => {
    const error = normalizeHttpError(fastifyError({ code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE' }), {
      contentType: `text/${'x'.repeat(10_000)}`,
      bodyLimit: 1,
    });
    expect(error.message.length).toBeLessThan(250);
  });

  it('turns schema validation into VALIDATION_FAILED with one path per failing field', () => {
    const problem = problemOf(
      fastifyError({
        code: 'FST_ERR_VALIDATION',
        statusCode: 400,
        validationContext: 'querystring',
        validation: [
          { instancePath: '/limit', message: 'Too big' },
          { instancePath: '/items/0/name', message: 'Required' },
        ],
      }),
    );
    expect(problem.status).toBe(400);
    expect(problem.body).toMatchObject({
      code: 'VALIDATION_FAILED',
      detail: 'Invalid querystring: querystring.limit: Too big',
      errors: [
        { path: 'querystring.limit', message: 'Too big' },
        { path: 'querystring.items[0].name', message: 'Required' },
      ],
    });
    const body = problemOf(fastifyError({ validationContext: 'body', validation: [{ instancePath: '' }] }));
    expect(body.body.errors).toEqual([{ path: '(root)', message: 'invalid' }]);
  });

  it("reports each unknown key of a strict zod schema at the key's own path", () => {
    const unknown = (validationContext: string, instancePath: string, keys: unknown[]) =>
      problemOf(
        fastifyError({
          code: 'FST_ERR_VALIDATION',
          statusCode: 400,
          validationContext,
          validation: [
            { keyword: 'unrecognized_keys', instancePath, message: 'Unrecognized keys', params: { keys } },
          ],
        }),
      ).body;
    expect(unknown('querystring', '/', ['foo', 'bar'])).toMatchObject({
      detail: 'Invalid querystring: querystring.foo: Unrecognized key: "foo"',
      errors: [
        { path: 'querystring.foo', message: 'Unrecognized key: "foo"' },
        { path: 'querystring.bar', message: 'Unrecognized key: "bar"' },
      ],
    });
    expect(unknown('body', '/options', ['x']).errors).toEqual([
      { path: 'options.x', message: 'Unrecognized key: "x"' },
    ]);
    expect(unknown('body', '/', ['x']).errors).toEqual([{ path: 'x', message: 'Unrecognized key: "x"' }]);
    const huge = unknown('querystring', '/', ['k'.repeat(10_000)]).errors as Array<{ path: string }>;
    expect(huge[0]!.path.length).toBeLessThan(200);
    // Without the keys it stays one issue at the object.
    expect(unknown('querystring', '/', []).errors).toEqual([
      { path: 'querystring', message: 'Unrecognized keys' },
    ]);
  });

  it("blames a SyntaxError on the body only when fastify marked it as the client's (400)", () => {
    const client = Object.assign(new SyntaxError('Unexpected end'), { statusCode: 400 });
    expect(problemOf(client)).toMatchObject({
      status: 400,
      body: { code: 'MALFORMED_JSON', detail: 'The body is not valid JSON: Unexpected end' },
    });
    const bug = problemOf(new SyntaxError('Unexpected token in a handler'));
    expect(bug).toMatchObject({
      status: 500,
      body: { code: 'INTERNAL', detail: 'An internal error occurred' },
    });
  });

  it('maps other client errors by status, and everything else to INTERNAL without its message', () => {
    const cases: Array<[number, string, number]> = [
      [401, 'UNAUTHORIZED', 401],
      [403, 'FORBIDDEN', 403],
      [404, 'NOT_FOUND', 404],
      [413, 'PAYLOAD_TOO_LARGE', 413],
      [415, 'UNSUPPORTED_MEDIA_TYPE', 415],
      [400, 'VALIDATION_FAILED', 400],
      [405, 'VALIDATION_FAILED', 400],
      [431, 'VALIDATION_FAILED', 400],
    ];
    for (const [statusCode, code, status] of cases) {
      const problem = problemOf(fastifyError({ code: 'FST_SOMETHING', statusCode, message: 'nope' }));
      expect(problem, String(statusCode)).toMatchObject({ status, body: { code } });
    }
    expect(problemOf(fastifyError({ statusCode: 400, message: 'bad url' })).body.errors).toEqual([
      { path: '(request)', message: 'bad url' },
    ]);
    const internal = normalizeHttpError(new Error('secret connection string'), context);
    expect(SluiceError.hasCode(internal, 'INTERNAL')).toBe(true);
    expect(toProblem(internal)).toMatchObject({
      status: 500,
      body: { detail: 'An internal error occurred' },
    });
    expect(normalizeHttpError(fastifyError({ statusCode: 502 }), context).code).toBe('INTERNAL');
    expect(normalizeHttpError('a string', context).code).toBe('INTERNAL');
    expect(normalizeHttpError(null, context).code).toBe('INTERNAL');
  });
});
