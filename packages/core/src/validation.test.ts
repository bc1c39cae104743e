import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { thrown } from '../test/helpers.js';
import { ConfigError, InvalidQueryError, SluiceError, ValidationError } from './errors.js';
import {
  formatPath,
  issuesOf,
  MAX_REPORTED_ISSUES,
  parseConfigOrThrow,
  parseOrThrow,
  parseQueryOrThrow,
} from './validation.js';

function zodError(schema: z.ZodType, input: unknown): z.ZodError {
  const result = schema.safeParse(input);
  if (result.success) throw new Error('expected the parse to fail');
  return result.error;
}

describe('formatPath', () => {
  it('renders keys with dots and indexes with brackets', () => {
    expect(formatPath([])).toBe('(root)');
    expect(formatPath(['a'])).toBe('a');
    expect(formatPath(['a', 'b', 0, 'c'])).toBe('a.b[0].c');
    expect(formatPath([0, 'name'])).toBe('[0].name');
    expect(formatPath(['endpoints', 0, 'primaryKey'])).toBe('endpoints[0].primaryKey');
    expect(formatPath(['indexes', 1, 0])).toBe('indexes[1][0]');
    expect(formatPath(['$filter', '$or', 2, 'value', '$in'])).toBe('$filter.$or[2].value.$in');
  });

  it('renders an empty key visibly and clips huge keys', () => {
    expect(formatPath([''])).toBe('[""]');
    expect(formatPath(['a', ''])).toBe('a[""]');
    const path = formatPath(['k'.repeat(100_000), 'x']);
    expect(path.length).toBeLessThan(200);
    expect(path.endsWith('….x')).toBe(true);
  });

  it('renders symbols', () => {
    expect(formatPath([Symbol('s')])).toBe('Symbol(s)');
  });
});

describe('issuesOf', () => {
  const Schema = z.strictObject({
    name: z.string(),
    nested: z.strictObject({ port: z.number().int() }).optional(),
    list: z.array(z.strictObject({ id: z.string() })).optional(),
    either: z.union([z.string(), z.strictObject({ url: z.string() })]).optional(),
  });

  it('reports every failing path', () => {
    const issues = issuesOf(
      zodError(Schema, { name: 1, nested: { port: 1.5 }, list: [{ id: 'a' }, { id: 2 }] }),
    );
    expect(issues.map((i) => i.path)).toEqual(['name', 'nested.port', 'list[1].id']);
    for (const issue of issues) expect(issue.message.length).toBeGreaterThan(0);
  });

  it('reports each unknown key at its own path', () => {
    const issues = issuesOf(zodError(Schema, { name: 'x', nested: { port: 1, prot: 2 }, extra: 1, more: 2 }));
    expect(issues).toEqual([
      { path: 'nested.prot', message: 'Unrecognized key: "prot"' },
      { path: 'extra', message: 'Unrecognized key: "extra"' },
      { path: 'more', message: 'Unrecognized key: "more"' },
    ]);
  });

  it('prefixes paths', () => {
    expect(issuesOf(zodError(Schema, { name: 1 }), ['body', 0])).toEqual([
      { path: 'body[0].name', message: expect.any(String) },
    ]);
  });

  it('reports the union alternative that matches the shape of the input', () => {
    expect(issuesOf(zodError(Schema, { name: 'x', either: { url: 5 } })).map((i) => i.path)).toEqual([
      'either.url',
    ]);
    expect(issuesOf(zodError(Schema, { name: 'x', either: { url: 'u', x: 1 } }))).toEqual([
      { path: 'either.x', message: 'Unrecognized key: "x"' },
    ]);
  });

  it('names the accepted types when no union alternative fits', () => {
    expect(issuesOf(zodError(Schema, { name: 'x', either: 5 }))).toEqual([
      { path: 'either', message: 'Invalid input: expected string or object' },
    ]);
    const literal = z.object({ origins: z.union([z.literal(true), z.array(z.string())]) });
    expect(issuesOf(zodError(literal, { origins: 5 }))).toEqual([
      { path: 'origins', message: 'Invalid input: expected true or array' },
    ]);
  });

  it('keeps a union’s own message', () => {
    const scalar = z.union([z.string(), z.number()], { error: 'expected a scalar' });
    expect(issuesOf(zodError(z.object({ v: scalar }), { v: {} }))).toEqual([
      { path: 'v', message: 'expected a scalar' },
    ]);
  });

  it('surfaces why a record key is invalid', () => {
    const Record = z.record(
      z.string().refine((k) => k !== 'constructor', { message: 'reserved key name' }),
      z.number(),
    );
    expect(issuesOf(zodError(Record, { constructor: 1 }))).toEqual([
      { path: 'constructor', message: 'invalid key: reserved key name' },
    ]);
  });

  it('caps the number of issues and clips what it echoes back', () => {
    const many = Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`k${i}`, i]));
    const issues = issuesOf(zodError(z.strictObject({}), many));
    expect(issues).toHaveLength(MAX_REPORTED_ISSUES);
    expect(issues[0]).toEqual({ path: 'k0', message: 'Unrecognized key: "k0"' });

    const hugeKey = 'k'.repeat(1_000_000);
    const [issue] = issuesOf(zodError(z.strictObject({}), { [hugeKey]: 1 }));
    expect(issue!.path.length).toBeLessThan(200);
    expect(issue!.message.length).toBeLessThan(200);

    const longMessage = z.string().refine(() => false, { message: 'm'.repeat(100_000) });
    expect(issuesOf(zodError(longMessage, 'x'))[0]!.message.length).toBeLessThanOrEqual(513);

    const arrays = z.array(z.number());
    expect(
      issuesOf(
        zodError(
          arrays,
          Array.from({ length: 10_000 }, () => 'x'),
        ),
      ),
    ).toHaveLength(MAX_REPORTED_ISSUES);
  });
});

describe('parseOrThrow / parseQueryOrThrow / parseConfigOrThrow', () => {
  const Schema = z.strictObject({ a: z.number(), b: z.string().default('d') });

  it('returns parsed data with defaults', () => {
    expect(parseOrThrow(Schema, { a: 1 })).toEqual({ a: 1, b: 'd' });
    expect(parseQueryOrThrow(Schema, { a: 1 })).toEqual({ a: 1, b: 'd' });
    expect(parseConfigOrThrow(Schema, { a: 1 })).toEqual({ a: 1, b: 'd' });
  });

  it('throws a ValidationError naming the first path and counting the rest', () => {
    const err = thrown(() => parseOrThrow(Schema, { a: 'x', b: 2, c: 3 }, 'Invalid thing'));
    expect(err).toBeInstanceOf(ValidationError);
    const v = err as ValidationError;
    expect(v.code).toBe('VALIDATION_FAILED');
    expect(v.status).toBe(400);
    expect(v.errors.map((e) => e.path)).toEqual(['a', 'b', 'c']);
    expect(v.message).toBe(`Invalid thing: a: ${v.errors[0]!.message} (and 2 more)`);
    expect(v.cause).toBeInstanceOf(z.ZodError);
  });

  it('uses a default summary and no count for a single issue', () => {
    const err = thrown(() => parseOrThrow(Schema, { a: 'x' })) as ValidationError;
    expect(err.message).toBe(`Invalid input: a: ${err.errors[0]!.message}`);
  });

  it('counts every issue in the summary even when the list is capped', () => {
    const many = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, i]));
    const err = thrown(() => parseOrThrow(z.strictObject({}), many)) as ValidationError;
    expect(err.errors).toHaveLength(MAX_REPORTED_ISSUES);
    expect(err.message).toBe('Invalid input: k0: Unrecognized key: "k0" (and 299 more)');
  });

  it('throws the query and config error classes', () => {
    const q = thrown(() => parseQueryOrThrow(Schema, {}));
    expect(q).toBeInstanceOf(InvalidQueryError);
    expect((q as InvalidQueryError).code).toBe('INVALID_QUERY');
    expect((q as InvalidQueryError).errors).toEqual([{ path: 'a', message: expect.any(String) }]);
    expect((q as InvalidQueryError).message).toMatch(/^Invalid query: a: /);

    const c = thrown(() => parseConfigOrThrow(Schema, []));
    expect(c).toBeInstanceOf(ConfigError);
    expect((c as ConfigError).code).toBe('CONFIG_INVALID');
    expect((c as ConfigError).errors).toEqual([{ path: '(root)', message: expect.any(String) }]);
    expect(SluiceError.isInstance(c)).toBe(true);
  });
});
