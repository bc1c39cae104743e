/**
 * The filters of one change feed — its `filter=` parameter and its token's row filter — checked and compiled for
 * each generation the feed reads. A feed outlives generations, and a rebuild may change the schema: a field the
 * filter names may be gone or have another type. Compiled once against the first generation, such a filter matched
 * nothing in the new one, so the feed deleted every record and went on as a feed of nothing while every query with
 * the same filter was refused. Checked per generation, it ends the feed instead (the reconnect gets the refusal).
 */
import { checkFilter, checkRowFilter } from '@sluice/cache';
import {
  andFilters,
  canonicalFilter,
  compileFilter,
  type Filter,
  hashJson,
  type QueryLimits,
  type ReadableCache,
  SluiceError,
} from '@sluice/core';
import { assertRowFilterFitsIn } from '../endpoint-access.js';

/**
 * Where the `filter` parameter sits in the request, as the route's schema names its parameters: its refusals point
 * there (`querystring.filter`, `querystring.filter.value.$gte`), as a query body's point into the body (`$filter.…`).
 */
export const FILTER_PATH = 'querystring.filter';

/** Whether a record is in a subscriber's view. */
export type RecordMatch = (record: Record<string, unknown>) => boolean;

/** A feed's filter does not fit a generation's fields; `cause` is the refusal a request would get (400 / 403). */
export class FeedFilterUnfit extends Error {
  readonly code = 'FEED_FILTER_UNFIT';
  constructor(
    readonly generation: string,
    override readonly cause: SluiceError,
  ) {
    super(`the feed's filter does not fit generation ${generation}: ${cause.message}`, { cause });
  }
}

/**
 * The filters of one feed, compiled per generation (cached by the generation's cache handle).
 *
 * @example
 * ```ts
 * const filters = new FeedFilter('items', { category: 'a' }, scope.rowFilter('items'), limits);
 * filters.check(lease.cache); // throws INVALID_QUERY (filter=) or FORBIDDEN (row filter) when it does not fit
 * const matches = filters.matchesIn(cache); // null: every record; throws FeedFilterUnfit when it does not fit
 * ```
 */
export class FeedFilter {
  private readonly compiled = new WeakMap<ReadableCache, RecordMatch | null>();
  /**
   * Which records the feed shows, as its event tokens carry it (token.ts `view`): a fingerprint of both filters
   * in core's `canonicalFilter` spelling (keys in any order, a lone `$eq` as its bare value), or null when neither
   * filters anything. A token resumed under another view is
   * a `reset {reason: "filter-changed"}`: its position says what a subscriber of the other view was sent.
   */
  readonly view: string | null;

  constructor(
    private readonly endpoint: string,
    /** The `filter=` parameter as parsed JSON (an object), or undefined. */
    private readonly filter: unknown,
    /** The token's row filter for the endpoint, or undefined. */
    private readonly rowFilter: Filter | undefined,
    private readonly limits: QueryLimits,
  ) {
    this.view = feedView(filter, rowFilter);
  }

  /** The token has a row filter (its `commit` events carry only the positions it may see). */
  get rowFiltered(): boolean {
    return this.rowFilter !== undefined;
  }

  /**
   * The match for records of `cache`'s generation (null when nothing is filtered), or the refusal a request would
   * get: `FORBIDDEN` for a row filter that does not fit (the issuer's mistake; checked first), `INVALID_QUERY` for
   * a `filter=` that does not.
   */
  check(cache: ReadableCache): RecordMatch | null {
    const known = this.compiled.get(cache);
    if (known !== undefined) return known;
    assertRowFilterFitsIn(cache, this.rowFilter, this.endpoint, this.limits);
    // Checked against the generation's fields as a query's $filter is (operands in their stored form, timestamps
    // as canonical UTC text), so the feed and queries select the same records.
    const filter =
      this.filter === undefined
        ? undefined
        : checkFilter(this.filter, cache.schema, this.limits, FILTER_PATH);
    const rows =
      this.rowFilter === undefined ? undefined : checkRowFilter(this.rowFilter, cache.schema, this.limits);
    const combined = andFilters(filter, rows);
    const match = Object.keys(combined).length > 0 ? compileFilter(combined) : null;
    this.compiled.set(cache, match);
    return match;
  }

  /** {@link FeedFilter.check} for a generation an open feed moves to: a refusal is a {@link FeedFilterUnfit}. */
  matchesIn(cache: ReadableCache, generation: string): RecordMatch | null {
    try {
      return this.check(cache);
    } catch (err) {
      if (SluiceError.isInstance(err)) throw new FeedFilterUnfit(generation, err);
      throw err;
    }
  }
}

/** Hex digits of a view fingerprint: 88 bits, so two different views never meet in practice. */
const VIEW_DIGITS = 22;

/** An absent or empty filter lets every record through. */
function filters(filter: unknown): filter is Filter {
  return typeof filter === 'object' && filter !== null && Object.keys(filter).length > 0;
}

/**
 * The view fingerprint of a feed's `filter=` and row filter (null: neither filters). Each is taken in the one
 * spelling core's filter compiler defines (`canonicalFilter`: a lone `$eq` is its bare value), in canonical JSON
 * (key order does not matter): resumed with `{"a": {"$eq": 1}}` a token of `{"a": 1}` goes on exactly after its
 * position, as it was a needless reset and snapshot before. Other spellings of one set of records (another
 * timestamp spelling, `$in` of one value, the same condition as `filter=` or as a row filter) are still different
 * views: a needless snapshot, never a wrong copy.
 *
 * @example
 * ```ts
 * feedView({ category: 'a' }, undefined) === feedView({ category: { $eq: 'a' } }, undefined); // true
 * feedView(undefined, undefined); // null: every record
 * ```
 */
export function feedView(filter: unknown, rowFilter: Filter | undefined): string | null {
  if (!filters(filter) && !filters(rowFilter)) return null;
  const spelled = (f: unknown) => (filters(f) ? canonicalFilter(f) : null);
  return hashJson([spelled(filter), spelled(rowFilter)]).slice(0, VIEW_DIGITS);
}
