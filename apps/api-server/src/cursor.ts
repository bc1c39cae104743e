import { CursorExpiredError, InvalidQueryError } from '@sluice/core';

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

/**
 * Unwraps a client cursor for the generation `cacheName`; a cursor of any other generation throws
 * {@link CursorExpiredError}, a cursor that is not ours throws `INVALID_QUERY` naming `$after`.
 *
 * @example
 * ```ts
 * const inner = unwrapCursor(query.after, lease.generation.name);
 * ```
 */
export function unwrapCursor(cursor: string, cacheName: string): string {
  const dot = cursor.indexOf('.');
  const inner = dot > 0 ? cursor.slice(dot + 1) : '';
  if (dot <= 0 || inner === '' || !/^[A-Za-z0-9_-]+$/.test(cursor.slice(0, dot)))
    throw new InvalidQueryError('Invalid query: $after: not a cursor returned by this API', [
      { path: '$after', message: 'not a cursor returned by this API' },
    ]);
  const generation = Buffer.from(cursor.slice(0, dot), 'base64url').toString('utf8');
  if (generation !== cacheName)
    throw new CursorExpiredError(
      `The cursor belongs to cache generation "${generation}", which no longer serves this endpoint (now "${cacheName}"); restart the query`,
    );
  return inner;
}
