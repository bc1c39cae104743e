import { createHash } from 'node:crypto';
import { z } from 'zod';

/** Keys that would let a payload reach an object's prototype if copied naively. */
export const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

/** A JSON scalar. */
export type JsonScalar = string | number | boolean | null;
/** Any JSON value. */
export type JsonValue = JsonScalar | JsonValue[] | { [key: string]: JsonValue };

/** A finite-number-or-string-or-boolean-or-null schema. */
export const JsonScalarSchema = z.union([z.string().max(65_536), z.number().finite(), z.boolean(), z.null()]);

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
