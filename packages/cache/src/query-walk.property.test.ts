/**
 * Page walks while records are written between the pages (real LMDB, through the cache's public query API): a walk
 * never silently skips or repeats records. Checked against what was written: every record that exists unchanged for
 * the whole walk and matches the filter appears exactly once; the walk's records come in strictly increasing order
 * of the query (so nothing appears twice at one position); a record appears again only after it was written with
 * another position. Orders by string, number, JSON, timestamp and the primary key, ascending and descending, with
 * filters, long values (cursors abbreviate them; index keys truncate them) and a small `cache.scanCap`.
 */
import {
  type CacheSchema,
  compareScalars,
  compileFilter,
  type Filter,
  parseQuery,
  type RecordOp,
  SluiceError,
  type SortDirection,
} from '@sluice/core';
import { type SeededRandom, seededRandom, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';
import type { RwCache } from './rw-cache.js';

type Rng = SeededRandom;

const schema: CacheSchema = {
  fields: { id: 'integer', n: 'number', s: 'string', j: 'json', at: 'timestamp', cat: 'string' },
  primaryKey: ['id'],
  indexes: [['s'], ['n'], ['at'], ['j'], ['cat', 'n'], ['cat', 's']],
};

/** Longer than an index key component's budget (at most 961 bytes): stored truncated, re-sorted while scanned. */
const LONG = 'L'.repeat(1_200);
/** Longer than what a cursor carries whole (48 characters): abbreviated to a prefix and a hash. */
const MID = 'm'.repeat(60);
const STRINGS = [
  '',
  'a',
  'ab',
  'b',
  `${MID}`,
  `${MID}a`,
  `${MID}b`,
  `${MID}x`,
  LONG,
  `${LONG}a`,
  `${LONG}b`,
  `${LONG}x`,
];
const JSONS: unknown[] = [
  [1, 2],
  ['x'],
  [MID],
  [`${MID}a`, 1],
  [`${MID}b`],
  { k: MID },
  { k: `${MID}x` },
  [LONG],
  [`${LONG}a`],
  [`${LONG}b`, 2],
  { k: `${LONG}x` },
];
const INSTANTS = [
  '2026-01-01T00:00:00.000000Z',
  '2026-01-01T00:00:00.000001Z',
  '2026-03-01T12:00:00.500000Z',
  '2027-07-07T07:07:07.070707Z',
];
const CATS = ['a', 'b', 'c'];

function randomRecord(rng: Rng, id: number): Record<string, unknown> {
  const record: Record<string, unknown> = { id, cat: rng.pick(CATS) };
  if (rng.chance(0.9)) record.n = rng.pick([-2, -1, 0, 0.5, 1, 2, 3]);
  if (rng.chance(0.9)) record.s = rng.pick(STRINGS);
  if (rng.chance(0.9)) record.j = rng.pick(JSONS);
  if (rng.chance(0.9)) record.at = rng.pick(INSTANTS);
  return record;
}

const ORDERS: Array<Array<[string, SortDirection]>> = [
  [['s', 'asc']],
  [['s', 'desc']],
  [['n', 'asc']],
  [['n', 'desc']],
  [['j', 'asc']],
  [['j', 'desc']],
  [['at', 'asc']],
  [['at', 'desc']],
  [['id', 'desc']],
  [],
  [
    ['cat', 'asc'],
    ['s', 'asc'],
  ],
  [
    ['s', 'desc'],
    ['n', 'desc'],
  ],
  [
    ['j', 'asc'],
    ['n', 'asc'],
  ],
  [
    ['s', 'asc'],
    ['j', 'desc'],
  ],
];

const FILTERS: Filter[] = [
  {},
  {},
  { cat: 'a' },
  { cat: { $in: ['a', 'b'] } },
  { n: { $gte: 0 } },
  { s: { $contains: 'x' } },
  { $or: [{ cat: 'b' }, { n: 1 }] },
];

/** The query's order over records: its fields (a missing one is null), then the primary key. */
function comparator(order: Array<[string, SortDirection]>) {
  const tie: SortDirection = order.length > 0 ? order[order.length - 1]![1] : 'asc';
  const parts = [...order, ['id', tie] as [string, SortDirection]];
  const value = (r: Record<string, unknown>, f: string) => (Object.hasOwn(r, f) ? r[f] : null);
  return (a: Record<string, unknown>, b: Record<string, unknown>) => {
    for (const [field, direction] of parts) {
      const c = compareScalars(value(a, field), value(b, field));
      if (c !== 0) return direction === 'desc' ? -c : c;
    }
    return 0;
  };
}

/** Writes between two pages: often the record the cursor points at (deleted, moved, or rewritten), and others. */
function writesBetween(
  rng: Rng,
  truth: Map<number, Record<string, unknown>>,
  cursorId: number | undefined,
  nextId: () => number,
): RecordOp[] {
  const ops: RecordOp[] = [];
  const ids = [...truth.keys()];
  if (cursorId !== undefined && truth.has(cursorId) && rng.chance(0.5)) {
    if (rng.chance(0.5)) ops.push({ op: 'delete', key: [cursorId] });
    else ops.push({ op: 'upsert', record: randomRecord(rng, cursorId) });
  }
  for (let i = rng.int(0, 3); i > 0; i--) {
    const roll = rng.int(0, 2);
    if (roll === 0) ops.push({ op: 'upsert', record: randomRecord(rng, nextId()) });
    else if (roll === 1 && ids.length > 0)
      ops.push({ op: 'upsert', record: randomRecord(rng, rng.pick(ids)) });
    else if (ids.length > 0) ops.push({ op: 'delete', key: [rng.pick(ids)] });
  }
  return ops;
}

/** Applies `ops` to the reference (the last op of a key wins, as in the cache). */
function applyTruth(truth: Map<number, Record<string, unknown>>, ops: RecordOp[]): number[] {
  const touched: number[] = [];
  for (const op of ops) {
    if (op.op === 'delete') {
      const id = op.key[0] as number;
      truth.delete(id);
      touched.push(id);
    } else if (op.op === 'upsert') {
      const id = op.record.id as number;
      truth.set(id, op.record);
      touched.push(id);
    }
  }
  return touched;
}

interface WalkOutcome {
  walked: boolean;
  pagesAfterCursorWrite: number;
}

/** One walk with writes between its pages; asserts the contract and says whether it ran (or was refused). */
async function walkWhileWriting(
  rng: Rng,
  cache: RwCache,
  truth: Map<number, Record<string, unknown>>,
  nextId: () => number,
  context: string,
): Promise<WalkOutcome> {
  const order = rng.pick(ORDERS);
  const filter = rng.pick(FILTERS);
  const limit = rng.int(1, 6);
  const where = `${context} order=${JSON.stringify(order)} filter=${JSON.stringify(filter)} limit=${limit}`;
  const matches = compileFilter(filter);
  const compare = comparator(order);
  const base = parseQuery({ $filter: filter, $order_by: Object.fromEntries(order), $limit: limit });

  // Records present unchanged for the whole walk are those of the start no write touched.
  const start = new Map(truth);
  const touchedAt = new Map<number, number>(); // id → last write (as a count of pages walked)
  const seen: Array<{ id: number; record: Record<string, unknown>; page: number }> = [];
  const lastSeenPage = new Map<number, number>();
  let after: string | null = null;
  let pagesAfterCursorWrite = 0;
  for (let page = 0; page < 1_000; page++) {
    let result: ReturnType<RwCache['query']>;
    try {
      result = cache.query({ ...base, after });
    } catch (err) {
      // A query sorted in memory over more than `cache.scanCap` records is refused by design (only on a first page:
      // a walk that started goes on).
      if (page === 0 && SluiceError.hasCode(err, 'INVALID_QUERY'))
        return { walked: false, pagesAfterCursorWrite };
      throw new Error(`${where}: page ${page} failed: ${String(err)}`, { cause: err });
    }
    for (const record of result.records) {
      const id = record.id as number;
      expect(matches(record), `${where}: ${id} does not match the filter`).toBe(true);
      const previous = seen[seen.length - 1];
      if (previous)
        expect(
          compare(previous.record, record),
          `${where}: ${id} came after ${previous.id}, not in order (page ${page})`,
        ).toBeLessThan(0);
      const before = lastSeenPage.get(id);
      if (before !== undefined)
        expect(
          (touchedAt.get(id) ?? -1) >= before,
          `${where}: ${id} appeared twice (pages ${before} and ${page}) with no write of it between`,
        ).toBe(true);
      lastSeenPage.set(id, page);
      seen.push({ id, record, page });
    }
    after = result.next;
    if (after === null) break;
    const cursorId = result.records[result.records.length - 1]?.id as number | undefined;
    const ops = writesBetween(rng, truth, cursorId, nextId);
    if (ops.length > 0) {
      if (ops.some((op) => (op.op === 'delete' ? op.key[0] : op.record.id) === cursorId))
        pagesAfterCursorWrite += 1;
      cache.apply(ops, { onConflict: 'overwrite' });
      await cache.commit(null);
      for (const id of applyTruth(truth, ops)) touchedAt.set(id, page);
    }
  }
  expect(after, `${where}: the walk did not end`).toBeNull();
  const count = new Map<number, number>();
  for (const { id } of seen) count.set(id, (count.get(id) ?? 0) + 1);
  for (const [id, record] of start) {
    if (touchedAt.has(id) || !matches(record)) continue;
    expect(count.get(id) ?? 0, `${where}: record ${id} (unchanged throughout) appeared this many times`).toBe(
      1,
    );
  }
  return { walked: true, pagesAfterCursorWrite };
}

describe('page walks while records are written', () => {
  for (const { seed, scanCap } of [
    { seed: 20260601, scanCap: 1_000_000 },
    { seed: 20260602, scanCap: 7 },
    { seed: 20260603, scanCap: 1_000_000 },
  ]) {
    it(`never skips or repeats a record (seed ${seed}, cache.scanCap ${scanCap})`, {
      timeout: 120_000,
    }, async () => {
      const rng = seededRandom(seed);
      await using dir = await tempDir();
      await using caches = await openCacheManager(dir.path, { scanCap, maxLimit: 1000 });
      await using cache = await caches.create({ endpoint: 'walks', schema });
      const truth = new Map<number, Record<string, unknown>>();
      let id = 0;
      const nextId = () => ++id;
      const initial: RecordOp[] = [];
      for (let i = 0; i < 80; i++) initial.push({ op: 'upsert', record: randomRecord(rng, nextId()) });
      cache.apply(initial);
      await cache.commit(null);
      applyTruth(truth, initial);

      let walked = 0;
      let cursorWrites = 0;
      for (let w = 0; w < 40; w++) {
        const outcome = await walkWhileWriting(rng, cache, truth, nextId, `seed ${seed} walk ${w}`);
        if (outcome.walked) walked += 1;
        cursorWrites += outcome.pagesAfterCursorWrite;
      }
      // The walks ran (not all refused) and often wrote the very record their cursor pointed at.
      expect(walked).toBeGreaterThan(20);
      expect(cursorWrites).toBeGreaterThan(20);
    });
  }
});
