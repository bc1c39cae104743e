/**
 * Response bodies assembled from stored record bytes: `{"records":[…],"next":…}` is the cache's JSON array of
 * the records' stored texts between two constant pieces, with no record decoded or re-serialized on the way.
 */
import type { JsonPageFrame } from '@sluice/core';
import { sealCursor, wrapCursor } from './cursor.js';
import type { PositionSeal } from './position-seal.js';

const HEAD = '{"records":';
const OPEN = Buffer.from(HEAD);
const TAIL_NULL = ',"next":null}';
const CLOSE_NULL = Buffer.from(TAIL_NULL);

/**
 * The body of a query page: the records' JSON array (`[…]`, as `queryJson` returns it), then the `next` cursor.
 *
 * @example
 * ```ts
 * pageBody(Buffer.from('[{"id":1}]'), null).toString(); // '{"records":[{"id":1}],"next":null}'
 * ```
 */
export function pageBody(records: Buffer, next: string | null): Buffer {
  // A cursor is base64url plus ".": JSON.stringify only adds the quotes.
  const close = next === null ? CLOSE_NULL : Buffer.from(`,"next":${JSON.stringify(next)}}`);
  return Buffer.concat([OPEN, records, close], OPEN.length + records.length + close.length);
}

// The frame of the generation serving now (requests of one endpoint alternate between at most two generations,
// and only around a switch), so a page costs no frame object.
let lastFrame: { cacheName: string; frame: JsonPageFrame } | null = null;

/**
 * What `queryJson` writes a page of generation `cacheName` between, so that its `json` is the whole body
 * ({@link pageBody}'s bytes, with the cache's `next` wrapped for the client as `wrapCursor` does) in one buffer.
 *
 * @example
 * ```ts
 * const page = lease.cache.queryJson(query, pageFrame(lease.generation.name)); // page.json: the body
 * ```
 */
export function pageFrame(cacheName: string): JsonPageFrame {
  if (lastFrame?.cacheName !== cacheName) {
    const frame: JsonPageFrame = {
      head: HEAD,
      tail: (next) => (next === null ? TAIL_NULL : `,"next":${JSON.stringify(wrapCursor(cacheName, next))}}`),
    };
    lastFrame = { cacheName, frame };
  }
  return lastFrame.frame;
}

/**
 * {@link pageFrame} for a reader with a row filter: its `next` sealed (`sealCursor`), as the cursor of a page cut
 * short at `cache.scanCap` points at the last record examined, which may be one the reader may not see.
 *
 * @example
 * ```ts
 * const page = lease.cache.queryJson(query, sealedPageFrame(lease.generation.name, seal), { rowFilter });
 * ```
 */
export function sealedPageFrame(cacheName: string, seal: PositionSeal): JsonPageFrame {
  return {
    head: HEAD,
    tail: (next) =>
      next === null ? TAIL_NULL : `,"next":${JSON.stringify(sealCursor(seal, cacheName, next))}}`,
  };
}
