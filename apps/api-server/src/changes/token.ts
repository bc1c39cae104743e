import { isCacheNameOf } from '@sluice/cache';
import { ValidationError } from '@sluice/core';

/** Where a change-feed subscriber is: the last change it received of one generation of one endpoint. */
export interface FeedPosition {
  endpoint: string;
  /** The concrete cache generation (its name). */
  generation: string;
  /** The last change sequence received (0 = nothing yet). */
  seq: number;
}

const PREFIX = 'c1.';
const MAX_TOKEN_LENGTH = 2048;

/**
 * Encodes a feed position as an opaque token (the SSE `id` of every data event). Tokens name the endpoint, so
 * one endpoint's token is refused by another; they stay meaningful across generations (the generation is in them).
 *
 * @example
 * ```ts
 * const token = encodeFeedToken({ endpoint: 'items', generation: 'items-01jf…', seq: 42 });
 * decodeFeedToken(token, 'items'); // { endpoint: 'items', generation: 'items-01jf…', seq: 42 }
 * ```
 */
export function encodeFeedToken(position: FeedPosition): string {
  const body = JSON.stringify([position.endpoint, position.generation, position.seq]);
  return PREFIX + Buffer.from(body, 'utf8').toString('base64url');
}

/**
 * Decodes a token sent as `after` or `Last-Event-ID`. A malformed one, another endpoint's, or one whose generation is
 * no name a generation of this endpoint could have (the alias itself, another endpoint's generation, a path) is
 * `VALIDATION_FAILED`: it was never issued, so it is bad input — not a `reset`, which is for a real token whose
 * generation has vanished or whose position is past retention (the feed decides those once it looks).
 */
export function decodeFeedToken(token: string, endpoint: string, path = 'querystring.after'): FeedPosition {
  const invalid = (why: string) =>
    new ValidationError(`Invalid change-feed token: ${why}`, [{ path, message: why }]);
  if (token.length > MAX_TOKEN_LENGTH || !token.startsWith(PREFIX)) throw invalid('not a change-feed token');
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token.slice(PREFIX.length), 'base64url').toString('utf8'));
  } catch {
    throw invalid('not a change-feed token');
  }
  if (
    !Array.isArray(parsed) ||
    parsed.length !== 3 ||
    typeof parsed[0] !== 'string' ||
    typeof parsed[1] !== 'string' ||
    parsed[1].length === 0 ||
    !Number.isSafeInteger(parsed[2]) ||
    (parsed[2] as number) < 0
  )
    throw invalid('not a change-feed token');
  if (parsed[0] !== endpoint) throw invalid(`the token belongs to another endpoint`);
  if (!isCacheNameOf(endpoint, parsed[1])) throw invalid('the token names no generation of this endpoint');
  return { endpoint: parsed[0], generation: parsed[1], seq: parsed[2] as number };
}
