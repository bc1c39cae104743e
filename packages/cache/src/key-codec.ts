/**
 * Order-preserving binary encoding of key components, matching core's `compareScalars`:
 * null (and missing) < false < true < numbers < strings < other JSON values (compared as their JSON text).
 *
 * Each component is a tag byte and a self-delimiting body, so a key is the concatenation of its components and
 * byte order equals tuple order. Strings are encoded one UTF-16 code unit at a time as UTF-8 would encode a code
 * point (CESU-8), which makes byte order equal JavaScript's `<` on strings; bytes 0x00 and 0x01 are escaped so
 * 0x00 can terminate the string.
 *
 * LMDB keys are limited (1978 bytes). A string component whose encoding exceeds its budget is truncated:
 * `tag, first bytes, 0x00, 0xFF, 16-byte hash`. Truncated keys with the same prefix form a *cluster* whose
 * internal order is by hash, not by value; readers verify records against the full filter and re-sort
 * clusters by the real values.
 */
import { createHash } from 'node:crypto';

export const Tag = {
  null: 0x01,
  false: 0x02,
  true: 0x03,
  number: 0x04,
  string: 0x05,
  json: 0x06,
} as const;

/** Marks a truncated string component (it follows the 0x00 terminator; no tag is 0xFF). */
const TRUNCATED = 0xff;
const HASH_BYTES = 16;
/** LMDB's key limit with the default page size. */
export const MAX_KEY_BYTES = 1978;

const SURROGATE = /[\uD800-\uDFFF]/;

/** CESU-8 bytes of a string (= UTF-8 when it has no surrogates), before escaping. */
function cesu8(text: string): Buffer {
  if (!SURROGATE.test(text)) return Buffer.from(text, 'utf8');
  const out: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 0x3f));
    else out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f));
  }
  return Buffer.from(out);
}

/** Escapes 0x00 → 0x01 0x01 and 0x01 → 0x01 0x02, preserving order. */
function escapeLow(bytes: Buffer): Buffer {
  const out: number[] = [];
  for (const b of bytes) {
    if (b <= 0x01) out.push(0x01, b + 1);
    else out.push(b);
  }
  return Buffer.from(out);
}

function stringBody(text: string): Buffer {
  const raw = cesu8(text);
  return raw.indexOf(0) >= 0 || raw.indexOf(1) >= 0 ? escapeLow(raw) : raw;
}

const numberScratch = Buffer.alloc(8);

function numberComponent(value: number): Buffer {
  return writeNumberComponent(Buffer.allocUnsafe(9), value);
}

/**
 * Writes the 9-byte component of a number into `out` (no allocation: the hot path of `get`). The buffer can be
 * reused once LMDB has copied the key.
 */
export function writeNumberComponent(out: Buffer, value: number): Buffer {
  out[0] = Tag.number;
  numberScratch.writeDoubleBE(value === 0 ? 0 : value, 0);
  if ((numberScratch[0]! & 0x80) !== 0) {
    for (let i = 0; i < 8; i++) out[i + 1] = ~numberScratch[i]! & 0xff;
  } else {
    numberScratch.copy(out, 1);
    out[1]! |= 0x80;
  }
  return out;
}

/** Body budget of one string component, so that a key of `components` components fits LMDB's limit. */
export function stringBudget(components: number): number {
  return Math.max(32, Math.floor((MAX_KEY_BYTES - 16) / components) - (HASH_BYTES + 4));
}

/** Cuts an escaped body to at most `budget` bytes without splitting an escape pair. */
function cut(body: Buffer, budget: number): Buffer {
  let end = budget;
  // An escape pair is 0x01 followed by 0x01/0x02; never end right after its first byte.
  let escapes = 0;
  for (let i = end - 1; i >= 0 && body[i] === 0x01; i--) escapes++;
  if (escapes % 2 === 1) end -= 1;
  return body.subarray(0, end);
}

function textComponent(tag: number, text: string, budget: number): Buffer {
  const body = stringBody(text);
  if (body.length <= budget) {
    const out = Buffer.allocUnsafe(body.length + 2);
    out[0] = tag;
    body.copy(out, 1);
    out[body.length + 1] = 0x00;
    return out;
  }
  const prefix = cut(body, budget);
  const hash = createHash('sha256').update(text).digest().subarray(0, HASH_BYTES);
  return Buffer.concat([Buffer.from([tag]), prefix, Buffer.from([0x00, TRUNCATED]), hash]);
}

/**
 * A position among JSON (non-scalar) values given by a JSON text that need not parse: it orders, and encodes as a key
 * component, as a value with that text would. A cursor whose long value can no longer be recovered continues from its
 * prefix with one.
 */
export class JsonTextBound {
  constructor(readonly text: string) {}
}

/** The text a non-scalar value is ordered by (core's `compareScalars` uses its JSON). */
function jsonText(value: unknown): string {
  if (value instanceof JsonTextBound) return value.text;
  return JSON.stringify(value) ?? 'null';
}

/** Encodes one value as a key component (truncating strings longer than `budget` bytes). */
export function encodeComponent(value: unknown, budget: number): Buffer {
  if (value === null || value === undefined) return Buffer.from([Tag.null]);
  switch (typeof value) {
    case 'boolean':
      return Buffer.from([value ? Tag.true : Tag.false]);
    case 'number':
      return Number.isFinite(value) ? numberComponent(value) : Buffer.from([Tag.null]);
    case 'string':
      return textComponent(Tag.string, value, budget);
    default:
      return textComponent(Tag.json, jsonText(value), budget);
  }
}

/** Encodes a tuple of values as one key (one allocation for scalar-only tuples). */
export function encodeKey(values: readonly unknown[], budget: number): Buffer {
  if (values.length === 1) return encodeComponent(values[0], budget);
  let length = 0;
  let parts: Array<Buffer | null> | null = null;
  for (let i = 0; i < values.length; i++) {
    const value = values[i];
    if (typeof value === 'number' && Number.isFinite(value)) length += 9;
    else if (value === null || value === undefined || typeof value === 'boolean') length += 1;
    else {
      parts ??= new Array<Buffer | null>(values.length).fill(null);
      const part = encodeComponent(value, budget);
      parts[i] = part;
      length += part.length;
    }
  }
  const out = Buffer.allocUnsafe(length);
  let at = 0;
  for (let i = 0; i < values.length; i++) {
    const value = values[i];
    const part = parts?.[i];
    if (part) {
      part.copy(out, at);
      at += part.length;
    } else if (typeof value === 'number' && Number.isFinite(value)) {
      writeNumberComponent(out.subarray(at, at + 9), value);
      at += 9;
    } else {
      out[at] = value === true ? Tag.true : value === false ? Tag.false : Tag.null;
      at += 1;
    }
  }
  return out;
}

/** True when the component encoding of `value` under `budget` is truncated. */
export function isTruncated(component: Buffer): boolean {
  return (
    (component[0] === Tag.string || component[0] === Tag.json) &&
    component.length > HASH_BYTES + 2 &&
    component[component.length - HASH_BYTES - 1] === TRUNCATED &&
    component[component.length - HASH_BYTES - 2] === 0x00
  );
}

/**
 * Bounds of one component's value set, as byte strings relative to the component start:
 * every encoding of a value in the set lies in `[lo, hi)`. For an exact (non-truncated) value, `exact` is the
 * full component, which further components may extend.
 */
export interface ComponentRange {
  lo: Buffer;
  hi: Buffer;
  exact: Buffer | null;
}

const FF = Buffer.from([0xff]);

/** The range of encodings equal to `value`. */
export function equalRange(value: unknown, budget: number): ComponentRange {
  const component = encodeComponent(value, budget);
  if (!isTruncated(component)) return { lo: component, hi: Buffer.concat([component, FF]), exact: component };
  const clusterStart = component.subarray(0, component.length - HASH_BYTES);
  return { lo: clusterStart, hi: afterCluster(component), exact: null };
}

/** First byte string after every key whose component is in the truncation cluster of `component`. */
function afterCluster(component: Buffer): Buffer {
  // cluster = tag, prefix, 0x00, 0xFF, hash; everything in it starts with tag, prefix, 0x00.
  const upTo = component.length - HASH_BYTES - 1;
  const out = Buffer.from(component.subarray(0, upTo));
  out[upTo - 1] = 0x01;
  return out;
}

/** Lower bound of values `>` (or `>=`) `value`, within its type. */
export function lowerBound(value: unknown, inclusive: boolean, budget: number): Buffer {
  const component = encodeComponent(value, budget);
  if (isTruncated(component)) return component.subarray(0, component.length - HASH_BYTES);
  return inclusive ? component : Buffer.concat([component, FF]);
}

/** Upper bound (exclusive, as bytes) of values `<` (or `<=`) `value`, within its type. */
export function upperBound(value: unknown, inclusive: boolean, budget: number): Buffer {
  const component = encodeComponent(value, budget);
  if (isTruncated(component)) return afterCluster(component);
  return inclusive ? Buffer.concat([component, FF]) : component;
}

/** Start and end (exclusive) of a whole type's component range. */
export function typeRange(tag: number): { lo: Buffer; hi: Buffer } {
  return { lo: Buffer.from([tag]), hi: Buffer.from([tag + 1]) };
}

/**
 * Where each component of an encoded key ends, and whether it is truncated. Used to find clusters of
 * truncated keys while scanning.
 */
export function truncatedComponentEnd(key: Buffer, components: number): number {
  let at = 0;
  for (let c = 0; c < components && at < key.length; c++) {
    const tag = key[at]!;
    if (tag === Tag.number) {
      at += 9;
      continue;
    }
    if (tag !== Tag.string && tag !== Tag.json) {
      at += 1;
      continue;
    }
    let i = at + 1;
    while (i < key.length && key[i] !== 0x00) i++;
    if (key[i + 1] === TRUNCATED) return i + 2; // cluster identity: everything before the hash
    at = i + 1;
  }
  return -1;
}
