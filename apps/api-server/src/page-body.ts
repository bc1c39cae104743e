/**
 * Response bodies assembled from stored record bytes: `{"records":[…],"next":…}` is the cache's JSON array of
 * the records' stored texts between two constant pieces, with no record decoded or re-serialized on the way.
 */

const OPEN = Buffer.from('{"records":');
const CLOSE_NULL = Buffer.from(',"next":null}');

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
