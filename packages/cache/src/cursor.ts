import { hash } from 'node:crypto';
import { CursorExpiredError, type FieldType, InvalidQueryError } from '@sluice/core';
import { z } from 'zod';
import { typeMatches } from './schema.js';

/** Largest cursor accepted (the wire query allows 4096 characters). */
const MAX_CURSOR_CHARS = 4096;
/** Sort values longer than this (as text) are abbreviated in cursors, which must stay small. */
const ABBREVIATE_OVER = 48;

/** A long sort value in a cursor: its first characters and a hash of the whole. */
export interface Abbreviated {
  $p: string;
  $h: string;
  /** True for a JSON (non-string) value, whose order is by its JSON text. */
  $j?: true;
}

const AbbreviatedSchema = z.strictObject({
  $p: z.string().max(ABBREVIATE_OVER),
  $h: z.string().max(64),
  $j: z.literal(true).optional(),
});

const CursorSchema = z.strictObject({
  /** The cache generation the position belongs to. */
  c: z.string().min(1).max(512),
  /** The order the position is in (see {@link orderSignature}). */
  o: z.string().max(2048),
  /** Sort values then primary-key values of the last record returned (long ones abbreviated). */
  k: z.array(z.unknown()).max(64),
  /** Data key of that record (base64url), present when a value was abbreviated. */
  d: z.string().max(4096).optional(),
  /**
   * The change-log sequence after the snapshot the position was read in, present when a value was abbreviated: the
   * record's first change logged since keeps what it replaced, so the whole value is found again once the record
   * itself is gone or changed.
   */
  s: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  /** Hash of the filter the position belongs to (see {@link filterSignature}). */
  f: z.string().max(64).optional(),
});

/** A decoded `$after` position. */
export interface DecodedCursor {
  tuple: unknown[];
  /** Indexes of abbreviated tuple entries. */
  abbreviated: number[];
  dataKey: Buffer | null;
  /** The change-log sequence after the position's snapshot (see the cursor's `s`), or null. */
  logSequence: number | null;
}

/** A stable description of an ordering, so a cursor is only accepted for the order it was made for. */
export function orderSignature(orderBy: ReadonlyArray<{ field: string; direction: string }>): string {
  return orderBy.map((o) => `${o.field}:${o.direction === 'desc' ? 'd' : 'a'}`).join(',');
}

/** JSON with object keys sorted at every level, so equal filters written in another key order match. */
function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) {
    let out = '[';
    for (let i = 0; i < value.length; i++) out += (i > 0 ? ',' : '') + canonicalJson(value[i]);
    return `${out}]`;
  }
  // Plain loops rather than entries/filter/sort/map chains: this runs for every page that has a `next`.
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  let out = '{';
  for (const key of keys) {
    const item = record[key];
    if (item === undefined) continue;
    out += `${out.length > 1 ? ',' : ''}${JSON.stringify(key)}:${canonicalJson(item)}`;
  }
  return `${out}}`;
}

/** A stable hash of a filter, so a cursor is only accepted with the filter it was made for. */
export function filterSignature(filter: unknown): string {
  return valueHash(canonicalJson(filter ?? {}));
}

export function valueHash(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  // One-shot hashing: a Hash object per call cost ~4× as much, on every page that has a `next`.
  return hash('sha256', text, 'base64url').slice(0, 22);
}

function abbreviate(value: unknown): { value: unknown; abbreviated: boolean } {
  if (typeof value === 'string') {
    if (value.length <= ABBREVIATE_OVER) return { value, abbreviated: false };
    return { value: { $p: value.slice(0, ABBREVIATE_OVER), $h: valueHash(value) }, abbreviated: true };
  }
  if (value !== null && typeof value === 'object') {
    const text = JSON.stringify(value);
    if (text.length <= ABBREVIATE_OVER) return { value, abbreviated: false };
    return {
      value: { $p: text.slice(0, ABBREVIATE_OVER), $h: valueHash(value), $j: true },
      abbreviated: true,
    };
  }
  return { value, abbreviated: false };
}

/**
 * Encodes a position (the sort tuple of the last record, and — when a value is abbreviated — its data key and the
 * change-log sequence of the snapshot it was read in) as an opaque cursor.
 */
export function encodeCursor(
  cache: string,
  order: string,
  tuple: readonly unknown[],
  /** The record's data key, or how to get it (only needed when a value is abbreviated). */
  dataKey: Buffer | (() => Buffer),
  filter: string,
  /** The change-log sequence after the snapshot (only asked when a value is abbreviated; null: no log). */
  logSequence: () => number | null = () => null,
): string {
  let any = false;
  const k = tuple.map((value) => {
    const out = abbreviate(value);
    any ||= out.abbreviated;
    return out.value;
  });
  const body: Record<string, unknown> = { c: cache, o: order, f: filter, k };
  if (any) {
    body.d = (typeof dataKey === 'function' ? dataKey() : dataKey).toString('base64url');
    const sequence = logSequence();
    if (sequence !== null) body.s = sequence;
  }
  return Buffer.from(JSON.stringify(body), 'utf8').toString('base64url');
}

/** Whether a cursor's value can be one a record of this field type sorted by (null sorts as a value of its own). */
function fitsType(value: unknown, type: FieldType | undefined): boolean {
  return value === null || type === undefined || typeMatches(type, value);
}

/**
 * Decodes a cursor for `cache`, `order` and `filter`. Malformed → `INVALID_QUERY`; made by another cache
 * generation → `CURSOR_EXPIRED`; made for another order or filter → `INVALID_QUERY`; a value that no record of its
 * sort field (`fieldTypes`, in tuple order) can hold → `INVALID_QUERY` (an edited or mangled cursor would otherwise
 * start past every record, and an empty page reads as the end of the walk).
 */
export function decodeCursor(
  cursor: string,
  cache: string,
  order: string,
  fieldTypes: readonly (FieldType | undefined)[],
  filter: string,
): DecodedCursor {
  const tupleLength = fieldTypes.length;
  const invalid = (why: string) =>
    new InvalidQueryError(`Invalid query: $after: ${why}`, [{ path: '$after', message: why }]);
  if (typeof cursor !== 'string' || cursor.length === 0 || cursor.length > MAX_CURSOR_CHARS)
    throw invalid('not a cursor');
  let raw: unknown;
  try {
    raw = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    throw invalid('not a cursor');
  }
  const parsed = CursorSchema.safeParse(raw);
  if (!parsed.success) throw invalid('not a cursor');
  if (parsed.data.c !== cache) throw new CursorExpiredError();
  if (parsed.data.o !== order) throw invalid('the cursor was made for another $order_by');
  // Cursors made before filters were recorded carry none; they are accepted as they were.
  if (parsed.data.f !== undefined && parsed.data.f !== filter)
    throw invalid('the cursor was made for another $filter');
  if (parsed.data.k.length !== tupleLength) throw invalid('not a cursor');
  const abbreviated: number[] = [];
  parsed.data.k.forEach((value, i) => {
    if (value !== null && typeof value === 'object' && !Array.isArray(value) && '$h' in value) {
      if (!AbbreviatedSchema.safeParse(value).success) throw invalid('not a cursor');
      abbreviated.push(i);
    } else if (!fitsType(value, fieldTypes[i]))
      throw invalid('not a cursor of this query (a value of the wrong type)');
  });
  if (abbreviated.length > 0 && parsed.data.d === undefined) throw invalid('not a cursor');
  return {
    tuple: parsed.data.k,
    abbreviated,
    dataKey: parsed.data.d === undefined ? null : Buffer.from(parsed.data.d, 'base64url'),
    logSequence: parsed.data.s ?? null,
  };
}
