import { CursorExpiredError, InvalidQueryError } from '@sluice/core';
import { type PositionSeal, SealPurpose } from './position-seal.js';

/**
 * `$after` cursors handed to clients name the cache generation they were cut from, so a page walk that
 * crosses a blue/green switch fails with `CURSOR_EXPIRED` (410) instead of silently continuing on another
 * generation (which could skip or repeat records). Format: `base64url(cacheName) + "." + <cache cursor>`.
 */
export function wrapCursor(cacheName: string, inner: string | null): string | null {
  if (inner === null) return null;
  return `${cursorPrefix(cacheName)}${inner}`;
}

// The prefix of the generation serving now, encoded once rather than per page (one entry: requests of one
// endpoint alternate between at most two generations only around a switch).
let lastPrefix = { cacheName: '', prefix: '.' };
function cursorPrefix(cacheName: string): string {
  if (lastPrefix.cacheName !== cacheName)
    lastPrefix = { cacheName, prefix: `${Buffer.from(cacheName, 'utf8').toString('base64url')}.` };
  return lastPrefix.prefix;
}

/** The id a cache generation's name ends with (`newCacheName`: a ULID in lower-case Crockford base32). */
const GENERATION_ID = /^[0-9a-hjkmnp-tv-z]{26}$/;
const BASE64URL = /^[A-Za-z0-9_-]+$/;

function notACursor(why = 'not a cursor returned by this API'): InvalidQueryError {
  return new InvalidQueryError(`Invalid query: $after: ${why}`, [{ path: '$after', message: why }]);
}

/** What a sealed cursor starts with: a character no plain cursor (base64url, `.`) holds. */
const SEALED_MARK = '~';

/**
 * A cursor for a reader with a row filter: {@link wrapCursor}'s cursor sealed (position-seal.ts), so it discloses
 * nothing — a page cut short at `cache.scanCap` points at the last record examined, which the reader may not see.
 *
 * @example
 * ```ts
 * const next = sealCursor(seal, lease.generation.name, inner); // "~…", opened by unwrapCursor with the same seal
 * ```
 */
export function sealCursor(seal: PositionSeal, cacheName: string, inner: string | null): string | null {
  const wrapped = wrapCursor(cacheName, inner);
  return wrapped === null ? null : `${SEALED_MARK}${seal.seal(SealPurpose.cursor, wrapped)}`;
}

/** How a reader's cursors are sealed: `seal` opens sealed ones (null: auth off); `required` under a row filter. */
export interface CursorSealing {
  readonly seal: PositionSeal | null;
  /** A row-filtered reader takes only sealed cursors: a plain one, made by hand or for another token, is refused. */
  readonly required: boolean;
}

const UNSEALED: CursorSealing = { seal: null, required: false };

/**
 * Whether `generation` and `inner` make a cursor some generation of this endpoint could have cut: the name is
 * `<alias>-<26-character id>` with the serving generation's alias part, and `inner` is the cache's cursor (base64url
 * JSON) of that same generation. 410 tells a client "your walk was right but the data moved: restart it", so it is
 * kept for such cursors; anything else is a cursor this API never handed out, and 400.
 */
function isCursorOfEndpoint(generation: string, inner: string, cacheName: string): boolean {
  // Ids hold no "-": the serving name's last one ends the alias part (aliases may hold "-" themselves).
  const aliasPart = cacheName.slice(0, cacheName.lastIndexOf('-') + 1);
  if (aliasPart === '' || !generation.startsWith(aliasPart)) return false;
  if (!GENERATION_ID.test(generation.slice(aliasPart.length))) return false;
  if (!BASE64URL.test(inner)) return false;
  try {
    const decoded: unknown = JSON.parse(Buffer.from(inner, 'base64url').toString('utf8'));
    return typeof decoded === 'object' && decoded !== null && (decoded as { c?: unknown }).c === generation;
  } catch {
    return false;
  }
}

/**
 * Unwraps a client cursor for the generation `cacheName`. A well-formed cursor of another generation of this
 * endpoint throws {@link CursorExpiredError} (410: the walk crossed a switch); anything else — not ours, another
 * endpoint's, a generation part that is no generation name (`aXRlbXM` is just `items`), an inner part that does not
 * decode — throws `INVALID_QUERY` (400) naming `$after`. The serving generation's own cursor is checked in full by the
 * cache. A sealed cursor ({@link sealCursor}) is opened with `sealing.seal` first; under a row filter
 * (`sealing.required`) a plain one is refused.
 *
 * @example
 * ```ts
 * const inner = unwrapCursor(query.after, lease.generation.name);
 * ```
 */
export function unwrapCursor(cursor: string, cacheName: string, sealing: CursorSealing = UNSEALED): string {
  if (cursor.startsWith(SEALED_MARK)) {
    const opened = sealing.seal?.open(SealPurpose.cursor, cursor.slice(SEALED_MARK.length)) ?? null;
    if (opened === null) throw notACursor();
    return unwrapPlain(opened, cacheName);
  }
  if (sealing.required)
    throw notACursor(
      'not a cursor this token was given: a token with a row filter takes only the next cursors its own queries returned',
    );
  return unwrapPlain(cursor, cacheName);
}

/** {@link unwrapCursor} of a plain cursor (`base64url(cacheName).<cache cursor>`). */
function unwrapPlain(cursor: string, cacheName: string): string {
  const dot = cursor.indexOf('.');
  const inner = dot > 0 ? cursor.slice(dot + 1) : '';
  if (dot <= 0 || inner === '' || !BASE64URL.test(cursor.slice(0, dot))) throw notACursor();
  const generation = Buffer.from(cursor.slice(0, dot), 'base64url').toString('utf8');
  if (generation === cacheName) return inner;
  if (!isCursorOfEndpoint(generation, inner, cacheName)) throw notACursor();
  throw new CursorExpiredError(
    `The cursor belongs to cache generation "${generation}", which no longer serves this endpoint (now "${cacheName}"); restart the query`,
  );
}
