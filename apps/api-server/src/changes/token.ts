import { isCacheNameOf } from '@sluice/cache';
import { ValidationError } from '@sluice/core';
import { type PositionSeal, SealPurpose } from '../position-seal.js';

/** Where a change-feed subscriber is: the last change it received of one generation of one endpoint. */
export interface FeedPosition {
  endpoint: string;
  /** The concrete cache generation (its name). */
  generation: string;
  /** The last change sequence received (0 = nothing yet). */
  seq: number;
  /**
   * Set on the events of a switch's merge (the upserts/deletes turning `generation` into another): the generation
   * the merge led to and the sequence it was pinned at. A subscriber cut off in the middle of the merge holds some
   * records of each side; resuming, it is sent what turns that mixture into the new generation (switch-merge.ts).
   */
  merge?: MergePosition;
  /**
   * Which records the subscriber was shown: a fingerprint of its `filter=` and its bearer token's row filter
   * (feed-filter.ts `FeedFilter.view`), absent when neither filters anything. A position means nothing under another
   * view — the subscriber holds records the other view hides and lacks ones it shows — so a token resumed under
   * another one starts over (`reset {reason: "filter-changed"}`).
   */
  view?: string;
  /**
   * The token was sealed (position-seal.ts), as every token a row-filtered feed hands out is: its sequence counts
   * changes of records the row filter hides, so such a feed neither shows it nor takes a position it did not seal.
   */
  sealed?: true;
}

/** Where a switch's merge was going: the new generation and the sequence of its state the merge showed. */
export interface MergePosition {
  generation: string;
  seq: number;
}

const PREFIX = 'c1.';
/** A sealed token: the same fields, encrypted and authenticated with the server's key. */
const SEALED_PREFIX = 's1.';
const MAX_TOKEN_LENGTH = 2048;
/** A view fingerprint as `FeedFilter.view` writes it (hex of a hash): anything else was never issued. */
const VIEW = /^[0-9a-f]{1,64}$/;

/**
 * Encodes a feed position as an opaque token (the SSE `id` of every data event). Tokens name the endpoint, so
 * one endpoint's token is refused by another; they stay meaningful across generations (the generation is in them).
 * With `seal` (a row-filtered feed's) the token is sealed: its sequence, which counts every change of the log, hidden
 * records' included, is not readable, and no one can write one by hand.
 *
 * @example
 * ```ts
 * const token = encodeFeedToken({ endpoint: 'items', generation: 'items-01jf…', seq: 42 });
 * decodeFeedToken(token, 'items'); // { endpoint: 'items', generation: 'items-01jf…', seq: 42 }
 * ```
 */
export function encodeFeedToken(position: FeedPosition, seal?: PositionSeal): string {
  const fields: unknown[] = [position.endpoint, position.generation, position.seq];
  if (position.merge) fields.push(position.merge.generation, position.merge.seq);
  // Last, so a token of an unfiltered feed stays the same bytes as before views existed (the frames every
  // unfiltered subscriber shares, and tokens issued by earlier versions, keep their meaning).
  if (position.view !== undefined) fields.push(position.view);
  const body = JSON.stringify(fields);
  if (seal !== undefined) return SEALED_PREFIX + seal.seal(SealPurpose.feedToken, body);
  return PREFIX + Buffer.from(body, 'utf8').toString('base64url');
}

/**
 * Decodes a token sent as `after` or `Last-Event-ID`. A malformed one, another endpoint's, one whose generation is
 * no name a generation of this endpoint could have (the alias itself, another endpoint's generation, a path), or one
 * of a merge from a generation into itself is `VALIDATION_FAILED`: it was never issued, so it is bad input — not a
 * `reset`, which is for a real token whose generation has vanished or whose position is not in its log (the feed
 * decides those once it looks). A sealed token is opened with `seal` (the server's; null when auth is off): one it
 * does not open — altered, made up, or sealed under another `api.auth.jwtSecret` — is the same 400.
 */
export function decodeFeedToken(
  token: string,
  endpoint: string,
  path = 'querystring.after',
  seal: PositionSeal | null = null,
): FeedPosition {
  const invalid = (why: string) =>
    new ValidationError(`Invalid change-feed token: ${why}`, [{ path, message: why }]);
  if (token.length > MAX_TOKEN_LENGTH) throw invalid('not a change-feed token');
  const sealed = token.startsWith(SEALED_PREFIX);
  let body: string | null;
  if (sealed) body = seal?.open(SealPurpose.feedToken, token.slice(SEALED_PREFIX.length)) ?? null;
  else if (token.startsWith(PREFIX))
    body = Buffer.from(token.slice(PREFIX.length), 'base64url').toString('utf8');
  else body = null;
  if (body === null)
    throw invalid(
      sealed
        ? 'not a change-feed token of this server (sealed with another api.auth.jwtSecret, or altered)'
        : 'not a change-feed token',
    );
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw invalid('not a change-feed token');
  }
  const isSeq = (value: unknown) => Number.isSafeInteger(value) && (value as number) >= 0;
  if (!Array.isArray(parsed) || parsed.length < 3 || parsed.length > 6)
    throw invalid('not a change-feed token');
  // [endpoint, generation, seq], then the merge's [generation, seq] (5 or 6 fields), then the view (4 or 6 fields).
  const merging = parsed.length >= 5;
  const view: unknown = parsed.length % 2 === 0 ? parsed[parsed.length - 1] : undefined;
  if (
    typeof parsed[0] !== 'string' ||
    typeof parsed[1] !== 'string' ||
    parsed[1].length === 0 ||
    !isSeq(parsed[2]) ||
    (merging && (typeof parsed[3] !== 'string' || !isSeq(parsed[4]))) ||
    (view !== undefined && (typeof view !== 'string' || !VIEW.test(view)))
  )
    throw invalid('not a change-feed token');
  if (parsed[0] !== endpoint) throw invalid(`the token belongs to another endpoint`);
  if (!isCacheNameOf(endpoint, parsed[1])) throw invalid('the token names no generation of this endpoint');
  const position: FeedPosition = { endpoint: parsed[0], generation: parsed[1], seq: parsed[2] as number };
  if (merging) {
    if (!isCacheNameOf(endpoint, parsed[3] as string))
      throw invalid('the token names no generation of this endpoint');
    // A switch moves the alias to another generation: a merge into the generation it starts from was never issued.
    if (parsed[3] === parsed[1]) throw invalid('the token names a merge of a generation into itself');
    position.merge = { generation: parsed[3] as string, seq: parsed[4] as number };
  }
  if (view !== undefined) position.view = view as string;
  if (sealed) position.sealed = true;
  return position;
}
