import { createHash } from 'node:crypto';
import { z } from 'zod';

/** Keys that would let a payload reach an object's prototype if copied naively. */
export const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

/** A JSON scalar. */
export type JsonScalar = string | number | boolean | null;
/** Any JSON value. */
export type JsonValue = JsonScalar | JsonValue[] | { [key: string]: JsonValue };

/** A finite-number-or-string-or-boolean-or-null schema. */
export const JsonScalarSchema = z.union(
  [z.string().max(65_536), z.number().finite(), z.boolean(), z.null()],
  {
    error: 'expected a string, number, boolean or null',
  },
);

/** A key that is safe to copy into a plain object. */
export const SafeKeySchema = z
  .string()
  .min(1)
  .max(256)
  .refine((key) => !FORBIDDEN_KEYS.has(key), { message: 'reserved key name' });

/**
 * Serializes a JSON value with object keys sorted, so equal values always give equal strings
 * (the basis of request hashes and checkpoint comparison).
 */
export function canonicalJson(value: unknown): string {
  // Like JSON.stringify, honour toJSON (a Date is its ISO string, not `{}`), so distinct values never collide.
  if (
    value !== null &&
    typeof value === 'object' &&
    typeof (value as { toJSON?: unknown }).toJSON === 'function'
  )
    value = (value as { toJSON(): unknown }).toJSON();
  if (value === null || typeof value !== 'object') {
    const out = JSON.stringify(value);
    return out === undefined ? 'null' : out;
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/** SHA-256 (hex) of the canonical JSON of `value`. */
export function hashJson(value: unknown): string {
  return createHash('sha256').update(canonicalJson(value)).digest('hex');
}

/**
 * Wraps a record schema so that an own `__proto__` key is refused with a path instead of being silently
 * dropped (zod skips such keys to avoid prototype pollution, which would quietly change what the input means:
 * a filter `{"__proto__": {...}}` would match everything). Output and input types are those of `schema`.
 *
 * @example
 * ```ts
 * const Labels = refuseProtoKey(z.record(z.string(), z.string()));
 * Labels.safeParse(JSON.parse('{"__proto__": "x"}')).success; // false, path ["__proto__"]
 * ```
 */
export function refuseProtoKey<S extends z.ZodType>(
  schema: S,
  message = 'reserved key name',
): z.ZodType<z.output<S>, z.input<S>> {
  return z
    .unknown()
    .superRefine((raw, ctx) => {
      if (typeof raw === 'object' && raw !== null && Object.hasOwn(raw, '__proto__'))
        ctx.addIssue({ code: 'custom', path: ['__proto__'], message });
    })
    .pipe(schema) as unknown as z.ZodType<z.output<S>, z.input<S>>;
}
