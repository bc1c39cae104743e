import type { z } from 'zod';
import { ConfigError, type FieldIssue, InvalidQueryError, ValidationError } from './errors.js';

/** Renders a zod issue path as `a.b[0].c`. */
export function formatPath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else out += out === '' ? String(segment) : `.${String(segment)}`;
  }
  return out === '' ? '(root)' : out;
}

/** Converts zod issues into Sluice field issues with exact paths. */
export function issuesOf(error: z.ZodError, prefix: ReadonlyArray<PropertyKey> = []): FieldIssue[] {
  return error.issues.map((issue) => ({
    path: formatPath([...prefix, ...issue.path]),
    message: issue.message,
  }));
}

function summary(what: string, issues: FieldIssue[]): string {
  const first = issues[0];
  const head = first ? `${first.path}: ${first.message}` : 'invalid';
  return issues.length > 1 ? `${what}: ${head} (and ${issues.length - 1} more)` : `${what}: ${head}`;
}

/**
 * Parses `input` with `schema`, throwing a {@link ValidationError} that names every failing path.
 *
 * @example
 * ```ts
 * const request = parseOrThrow(TransferRequestSchema, body, 'Invalid transfer request');
 * ```
 */
export function parseOrThrow<S extends z.ZodType>(
  schema: S,
  input: unknown,
  what = 'Invalid input',
): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issues = issuesOf(result.error);
  throw new ValidationError(summary(what, issues), issues, { cause: result.error });
}

/** Like {@link parseOrThrow} but for queries: throws {@link InvalidQueryError}. */
export function parseQueryOrThrow<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issues = issuesOf(result.error);
  throw new InvalidQueryError(summary('Invalid query', issues), issues, { cause: result.error });
}

/** Like {@link parseOrThrow} but for configuration: throws {@link ConfigError}. */
export function parseConfigOrThrow<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issues = issuesOf(result.error);
  throw new ConfigError(summary('Invalid configuration', issues), issues, { cause: result.error });
}
