import type { z } from 'zod';
import { isMissing, suggestKey } from './config-hints.js';
import { ConfigError, type FieldIssue, InvalidQueryError, ValidationError } from './errors.js';

/** At most this many issues are reported for one input (a hostile body can produce thousands). */
export const MAX_REPORTED_ISSUES = 100;
/** Longest path segment / message echoed back, so a huge key or value is never reflected in full. */
const MAX_SEGMENT_CHARS = 128;
const MAX_MESSAGE_CHARS = 512;

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/**
 * Renders a zod issue path as `a.b[0].c`; the empty path is `(root)`. An empty key renders as `[""]`, and
 * over-long keys are clipped.
 */
export function formatPath(path: ReadonlyArray<PropertyKey>): string {
  let out = '';
  for (const segment of path) {
    if (typeof segment === 'number') out += `[${segment}]`;
    else if (segment === '') out += '[""]';
    else {
      const name = clip(String(segment), MAX_SEGMENT_CHARS);
      out += out === '' ? name : `.${name}`;
    }
  }
  return out === '' ? '(root)' : out;
}

type ZodIssue = z.ZodError['issues'][number];

/**
 * Of a failed union, the issues of the one alternative that matched the input's shape (every other
 * alternative failed on the type of the value itself), or `undefined` when that is ambiguous.
 */
function closestAlternative(issue: ZodIssue): ZodIssue[] | undefined {
  if (issue.code !== 'invalid_union' || !Array.isArray(issue.errors)) return undefined;
  const isTypeMismatch = (issues: ZodIssue[]) =>
    issues.every(
      (i) =>
        i.path.length === 0 &&
        (i.code === 'invalid_type' || i.code === 'invalid_value' || i.code === 'invalid_union'),
    );
  const candidates = issue.errors.filter((issues) => issues.length > 0 && !isTypeMismatch(issues));
  return candidates.length === 1 ? candidates[0] : undefined;
}

function messageOf(issue: ZodIssue): string {
  // A bad record key hides its reason ("reserved key name") one level down; surface it.
  if (issue.code === 'invalid_key' && issue.issues[0]) return `invalid key: ${issue.issues[0].message}`;
  // zod names an integer check `int`, which reads as jargon to whoever wrote `port: 8080.5`.
  if (issue.code === 'invalid_type' && issue.expected === 'int')
    return 'Invalid input: expected a whole number';
  // zod's bare "Invalid input" for a union of types says nothing; name the types it accepts.
  if (issue.code === 'invalid_union' && issue.message === 'Invalid input' && Array.isArray(issue.errors)) {
    const expected = new Set<string>();
    for (const alternative of issue.errors)
      for (const i of alternative) {
        if (i.path.length > 0) continue;
        if (i.code === 'invalid_type') expected.add(i.expected);
        else if (i.code === 'invalid_value')
          for (const v of i.values) expected.add(JSON.stringify(v) ?? String(v));
      }
    if (expected.size > 0) return `Invalid input: expected ${[...expected].join(' or ')}`;
  }
  return issue.message;
}

/**
 * What was parsed, and with which schema: given, an unknown key names the known key it resembles and a key left
 * out is said to be required. Configuration passes it (a file written by hand); request bodies do not.
 */
export interface IssueContext {
  schema: z.ZodType;
  input: unknown;
}

function collect(
  issues: ZodIssue[],
  prefix: ReadonlyArray<PropertyKey>,
  out: FieldIssue[],
  context: IssueContext | undefined,
): void {
  for (const issue of issues) {
    if (out.length >= MAX_REPORTED_ISSUES) return;
    const here = [...prefix, ...issue.path];
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys.slice(0, MAX_REPORTED_ISSUES - out.length)) {
        const likely = context ? suggestKey(context.schema, here, key) : undefined;
        out.push({
          path: formatPath([...here, key]),
          message: `Unrecognized key: ${JSON.stringify(clip(key, MAX_SEGMENT_CHARS))}${likely ? `; did you mean ${JSON.stringify(likely)}?` : ''}`,
        });
      }
      continue;
    }
    const alternative = closestAlternative(issue);
    if (alternative) {
      collect(alternative, here, out, context);
      continue;
    }
    // zod reports a key left out as a value of the wrong type ("expected array, received undefined").
    if (issue.code === 'invalid_type' && context && isMissing(context.input, here)) {
      out.push({ path: formatPath(here), message: `is required (expected ${issue.expected})` });
      continue;
    }
    out.push({ path: formatPath(here), message: clip(messageOf(issue), MAX_MESSAGE_CHARS) });
  }
}

/**
 * Converts zod issues into Sluice field issues with exact paths. An unknown key is reported at its own path
 * (`api.prot`, not `api`); a failed union reports the alternative that matched the input's shape (so
 * `nats.servers`, not `nats`); messages are clipped and at most {@link MAX_REPORTED_ISSUES} issues are kept.
 */
export function issuesOf(
  error: z.ZodError,
  prefix: ReadonlyArray<PropertyKey> = [],
  context?: IssueContext,
): FieldIssue[] {
  const out: FieldIssue[] = [];
  collect(error.issues, prefix, out, context);
  return out;
}

function countIssues(error: z.ZodError): number {
  return error.issues.reduce(
    (n, issue) => n + (issue.code === 'unrecognized_keys' ? issue.keys.length : 1),
    0,
  );
}

function summary(what: string, issues: FieldIssue[], total = issues.length): string {
  const first = issues[0];
  const head = first ? `${first.path}: ${first.message}` : 'invalid';
  return total > 1 ? `${what}: ${head} (and ${total - 1} more)` : `${what}: ${head}`;
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
  throw new ValidationError(summary(what, issues, countIssues(result.error)), issues, {
    cause: result.error,
  });
}

/** Like {@link parseOrThrow} but for queries: throws {@link InvalidQueryError}. */
export function parseQueryOrThrow<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issues = issuesOf(result.error);
  throw new InvalidQueryError(summary('Invalid query', issues, countIssues(result.error)), issues, {
    cause: result.error,
  });
}

/** Like {@link parseOrThrow} but for configuration: throws {@link ConfigError}. */
export function parseConfigOrThrow<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  throw configErrorOf(result.error, { context: { schema, input } });
}

/**
 * The {@link ConfigError} of a failed configuration parse: `before` (issues found ahead of the schema) first, then
 * the schema's, each path passed through `rename` (a value moved from an old key is blamed on the key as written).
 * With `context` (the schema and what it parsed), a misspelt key names the key it resembles
 * (`Unrecognized key: "indexs"; did you mean "indexes"?`) and a key left out says `is required`.
 *
 * @example
 * ```ts
 * const result = SluiceConfigSchema.safeParse(raw);
 * if (!result.success) throw configErrorOf(result.error, { context: { schema: SluiceConfigSchema, input: raw } });
 * ```
 */
export function configErrorOf(
  error: z.ZodError | undefined,
  options: { before?: FieldIssue[]; rename?: (path: string) => string; context?: IssueContext } = {},
): ConfigError {
  const rename = options.rename ?? ((path: string) => path);
  const fromSchema = error
    ? issuesOf(error, [], options.context).map((issue) => ({ ...issue, path: rename(issue.path) }))
    : [];
  const issues = [...(options.before ?? []), ...fromSchema].slice(0, MAX_REPORTED_ISSUES);
  const total = (options.before?.length ?? 0) + (error ? countIssues(error) : 0);
  return new ConfigError(summary('Invalid configuration', issues, total), issues, { cause: error });
}
