import type { IncomingHttpHeaders } from 'node:http';
import { ValidationError } from '@sluice/core';

/**
 * Headers a request may send once. Node keeps the first line of each and drops the others without a word, so a
 * request with two would be answered as if it had sent one — while a proxy in front may have read the other: two
 * `Host` lines must be refused (RFC 9112 § 3.2), and two `Content-Type` or `Authorization` lines leave what the body
 * is, or who is asking, to whichever hop reads which line.
 *
 * @example
 * ```ts
 * SINGLE_HEADERS.includes('authorization'); // true
 * ```
 */
export const SINGLE_HEADERS = ['host', 'content-type', 'authorization'] as const;

/**
 * The first of {@link SINGLE_HEADERS} that `rawHeaders` (a request's header lines as received: name, value, …)
 * carries more than once, or null.
 *
 * @example
 * ```ts
 * repeatedSingleHeader(['Host', 'a', 'host', 'b']); // 'host'
 * ```
 */
export function repeatedSingleHeader(rawHeaders: readonly string[]): string | null {
  let seen = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const index = SINGLE_HEADERS.indexOf(rawHeaders[i]!.toLowerCase() as (typeof SINGLE_HEADERS)[number]);
    if (index < 0) continue;
    const bit = 1 << index;
    if ((seen & bit) !== 0) return SINGLE_HEADERS[index]!;
    seen |= bit;
  }
  return null;
}

/**
 * True when a request's `Expect` asks for something other than `100-continue` — the one expectation a server meets
 * (RFC 9110 § 10.1.1); Node's own answer to the others is a bare 417 with no body.
 *
 * @example
 * ```ts
 * unmetExpectation({ expect: '100-Continue' }); // false (Node has answered it 100 Continue)
 * unmetExpectation({ expect: '200-ok' }); // true
 * ```
 */
export function unmetExpectation(headers: IncomingHttpHeaders): boolean {
  const expectation = headers.expect;
  return expectation !== undefined && !CONTINUE_EXPECTATION.test(expectation);
}

/** Node's own test for a 100-continue expectation (`_http_server.js`): what it answers `100 Continue` to. */
const CONTINUE_EXPECTATION = /(?:^|\W)100-continue(?:$|\W)/i;

/**
 * The refusal of a request whose header lines break {@link repeatedSingleHeader} or {@link unmetExpectation}
 * (400 `VALIDATION_FAILED` at `headers.<name>`), or null: the one rule the problem-details plugin applies to every
 * request and the api-server's fast routes leave to it.
 *
 * @example
 * ```ts
 * const problem = headerLinesProblem(request.raw.headers, request.raw.rawHeaders);
 * if (problem) throw problem;
 * ```
 */
export function headerLinesProblem(
  headers: IncomingHttpHeaders,
  rawHeaders: readonly string[],
): ValidationError | null {
  const repeated = repeatedSingleHeader(rawHeaders);
  if (repeated !== null)
    return new ValidationError(`Send one ${repeated} header`, [
      { path: `headers.${repeated}`, message: 'sent more than once' },
    ]);
  if (unmetExpectation(headers))
    return new ValidationError('Only the expectation "100-continue" can be met (RFC 9110 § 10.1.1)', [
      { path: 'headers.expect', message: 'only "100-continue" is supported' },
    ]);
  return null;
}
