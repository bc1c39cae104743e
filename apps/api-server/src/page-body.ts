/**
 * Response bodies assembled from stored record bytes: `{"records":[…],"next":…}` is the records' JSON texts
 * joined by commas between two constant pieces, with no record decoded or re-serialized on the way.
 */

const OPEN = Buffer.from('{"records":[');
const COMMA = Buffer.from(',');
const CLOSE_NULL = Buffer.from('],"next":null}');

/**
 * The body of a query page: each record's stored JSON text, then the `next` cursor (or null).
 *
 * @example
 * ```ts
 * pageBody([Buffer.from('{"id":1}')], null).toString(); // '{"records":[{"id":1}],"next":null}'
 * ```
 */
export function pageBody(records: readonly Buffer[], next: string | null): Buffer {
  const parts: Buffer[] = new Array(records.length * 2 + 1);
  let at = 0;
  parts[at++] = OPEN;
  for (let i = 0; i < records.length; i++) {
    if (i > 0) parts[at++] = COMMA;
    parts[at++] = records[i]!;
  }
  // A cursor is base64url plus ".": JSON.stringify only adds the quotes.
  parts[at++] = next === null ? CLOSE_NULL : Buffer.from(`],"next":${JSON.stringify(next)}}`);
  return Buffer.concat(parts.length === at ? parts : parts.slice(0, at));
}
