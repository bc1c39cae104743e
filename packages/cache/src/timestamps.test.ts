import { join } from 'node:path';
import {
  type CacheSchema,
  compileFilter,
  type Filter,
  type InvalidQueryError,
  parseQuery,
  type RecordOp,
} from '@sluice/core';
import { expectSluiceError, seededRandom, tempDir } from '@sluice/testkit';
import { open } from 'lmdb';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';
import { checkFilter } from './query-check.js';

/** Microseconds since the epoch, as a bigint: the reference instants (no text, no Date rounding). */
type Micros = bigint;

const BASE: Micros = BigInt(Date.UTC(2026, 11, 5, 23, 33, 49, 737)) * 1000n + 383n; // 2026-12-05T23:33:49.737383Z

const OFFSETS = ['Z', '+00:00', '+09:00', '-05:00', '+05:30', '-03:30', '+0100', null] as const;

/**
 * `instant` written with `offset` (null: no zone, read as UTC) and `digits` fraction digits (0, 3 or 6; the
 * instant must be a whole number of that unit), as a source or a client might write it.
 */
function spell(instant: Micros, offset: (typeof OFFSETS)[number], digits: 0 | 3 | 6): string {
  const minutes =
    offset === null || offset === 'Z'
      ? 0
      : (offset[0] === '-' ? -1 : 1) *
        (Number(offset.slice(1, 3)) * 60 + Number(offset.slice(offset.length - 2)));
  const local = instant + BigInt(minutes) * 60_000_000n;
  const ms = local / 1000n - (local % 1000n < 0n ? 1n : 0n);
  const micros = Number(local - ms * 1000n);
  const iso = new Date(Number(ms)).toISOString(); // YYYY-MM-DDTHH:MM:SS.mmmZ of the local wall clock
  const fraction = `${iso.slice(20, 23)}${String(micros).padStart(3, '0')}`.slice(0, digits);
  return `${iso.slice(0, 19)}${digits > 0 ? `.${fraction}` : ''}${offset ?? ''}`;
}

/** A random instant near BASE that `digits` digits write exactly. */
function instantFor(random: () => number, digits: 0 | 3 | 6): Micros {
  const unit = digits === 6 ? 1n : digits === 3 ? 1000n : 1_000_000n;
  // Within ±10 hours, so that offsets reorder the texts; many values within the same second.
  const spread = random() < 0.5 ? 2_000_000 : 36_000_000_000;
  const delta = BigInt(Math.floor((random() - 0.5) * spread));
  return ((BASE + delta) / unit) * unit;
}

const schema: CacheSchema = {
  fields: { id: 'integer', ts: 'timestamp', cat: 'string' },
  primaryKey: ['id'],
  indexes: [['ts'], ['cat', 'ts']],
};

interface Row {
  id: number;
  at: Micros | null;
  cat: string;
}

type Op = '$eq' | '$ne' | '$gt' | '$gte' | '$lt' | '$lte';

function holds(at: Micros | null, op: Op, bound: Micros): boolean {
  if (at === null) return op === '$ne';
  switch (op) {
    case '$eq':
      return at === bound;
    case '$ne':
      return at !== bound;
    case '$gt':
      return at > bound;
    case '$gte':
      return at >= bound;
    case '$lt':
      return at < bound;
    case '$lte':
      return at <= bound;
  }
}

/** Reference order: instants ascending (nulls first, as the cache orders null before any value), then id. */
function byInstant(a: Row, b: Row): number {
  if (a.at !== b.at) {
    if (a.at === null) return -1;
    if (b.at === null) return 1;
    return a.at < b.at ? -1 : 1;
  }
  return a.id - b.id;
}

describe('timestamp fields', () => {
  it('defect: timestamp fields compared as text — filters, $order_by, index scans and cursors follow the instants, whatever offset or precision either side is written with', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { maxLimit: 1000 });
    await using cache = await caches.create({ endpoint: 'items', schema });
    const random = seededRandom(20261205).next;
    const rows: Row[] = [];
    const ops: RecordOp[] = [];
    for (let id = 0; id < 400; id++) {
      const digits = ([0, 3, 6] as const)[Math.floor(random() * 3)]!;
      // Some rows share an instant with an earlier one, written another way.
      const twin = id > 10 && random() < 0.15 ? rows[Math.floor(random() * id)]!.at : undefined;
      const at = id % 37 === 0 ? null : twin !== undefined ? twin : instantFor(random, digits);
      const cat = `c${id % 3}`;
      rows.push({ id, at, cat });
      let ts: string | null = null;
      if (at !== null) {
        const exact = ([6, 3, 0] as const).filter(
          (d) => at % (d === 6 ? 1n : d === 3 ? 1000n : 1_000_000n) === 0n,
        );
        ts = spell(
          at,
          OFFSETS[Math.floor(random() * OFFSETS.length)]!,
          exact[Math.floor(random() * exact.length)]!,
        );
      }
      ops.push({ op: 'upsert', record: { id, ts, cat } });
    }
    cache.apply(ops);
    await cache.commit(null);

    // The probe's queries (a client's toISOString() bounds against PostgreSQL's microseconds and offsets).
    const count = (filter: Filter) => cache.count(filter);
    const expectCount = (filter: Filter, keep: (row: Row) => boolean) =>
      expect(count(filter), JSON.stringify(filter)).toBe(rows.filter(keep).length);
    const ms = (iso: string): Micros => BigInt(Date.parse(iso)) * 1000n;
    expectCount(
      { ts: { $gt: '2026-12-05T23:33:49.737Z' } },
      (r) => r.at !== null && r.at > ms('2026-12-05T23:33:49.737Z'),
    );
    expectCount(
      { ts: { $lt: '2026-12-06T00:00:00Z' } },
      (r) => r.at !== null && r.at < ms('2026-12-06T00:00:00Z'),
    );
    expectCount(
      { ts: { $gt: '2026-12-05T23:40:00.000Z' } },
      (r) => r.at !== null && r.at > ms('2026-12-05T23:40:00.000Z'),
    );

    const ops6: Op[] = ['$eq', '$ne', '$gt', '$gte', '$lt', '$lte'];
    for (let round = 0; round < 60; round++) {
      const known = rows[Math.floor(random() * rows.length)]!.at;
      const digits = ([0, 3, 6] as const)[Math.floor(random() * 3)]!;
      const bound = known !== null && random() < 0.5 ? known : instantFor(random, digits);
      const exact = ([6, 3, 0] as const).filter(
        (d) => bound % (d === 6 ? 1n : d === 3 ? 1000n : 1_000_000n) === 0n,
      );
      const text = spell(bound, OFFSETS[Math.floor(random() * OFFSETS.length)]!, exact[0]!);
      const op = ops6[round % ops6.length]!;
      const onCat = round % 4 === 0;
      const filter: Filter = onCat ? { cat: 'c1', ts: { [op]: text } } : { ts: { [op]: text } };
      const keep = (r: Row) => (!onCat || r.cat === 'c1') && holds(r.at, op, bound);
      expectCount(filter, keep);
      // Every page of an ordered query, asc and desc, walked by cursor.
      const direction = round % 2 === 0 ? 'asc' : 'desc';
      const expected = rows.filter(keep).sort(byInstant);
      if (direction === 'desc') expected.reverse();
      const got: number[] = [];
      let after: string | null = null;
      for (let page = 0; page < 100; page++) {
        const result = cache.query(
          parseQuery({
            $filter: filter,
            $order_by: { ts: direction },
            $limit: 17,
            ...(after ? { $after: after } : {}),
          }),
        );
        got.push(...result.records.map((r) => r.id as number));
        after = result.next;
        if (after === null) break;
      }
      expect(got, `${JSON.stringify(filter)} ${direction}`).toEqual(expected.map((r) => r.id));
    }

    // The change feed's filter= (and a token's row filter) is checkFilter + compileFilter over the change log's
    // records: it selects what the query selects.
    const logged = new Map<number, Record<string, unknown>>();
    for (const entry of cache.changeLog().read(0, 10_000))
      if (entry.op === 'upsert') logged.set(entry.record.id as number, entry.record);
    expect(logged.size).toBe(rows.length);
    for (const filter of [
      { ts: { $gt: '2026-12-06T08:33:49.737+09:00' } },
      { ts: { $lte: '2026-12-05T23:40:00.000Z' }, cat: 'c2' },
      { $or: [{ ts: { $lt: '2026-12-05T20:00:00-03:30' } }, { ts: null }] },
    ] as Filter[]) {
      const feed = compileFilter(checkFilter(filter, schema));
      const selected = [...logged.values()].filter(feed).map((r) => r.id as number);
      const queried = cache.query(parseQuery({ $filter: filter, $limit: 1000 })).records.map((r) => r.id);
      expect(
        selected.sort((a, b) => a - b),
        JSON.stringify(filter),
      ).toEqual(queried);
    }

    // $in with instants written differently from the stored ones.
    const picks = rows.filter((r) => r.at !== null).slice(0, 5);
    const inFilter: Filter = { ts: { $in: picks.map((r) => spell(r.at!, '+09:00', 6)) } };
    expectCount(inFilter, (r) => r.at !== null && picks.some((p) => p.at === r.at));
    // A bare value is $eq.
    expectCount({ ts: spell(picks[0]!.at!, '-05:00', 6) }, (r) => r.at === picks[0]!.at);
  });

  it('defect: timestamp fields compared as text — equal instants written differently are one key; records read back in UTC with microseconds', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({
      endpoint: 'events',
      schema: { fields: { at: 'timestamp', v: 'integer' }, primaryKey: ['at'], indexes: [] },
    });
    cache.apply([{ op: 'upsert', record: { at: '2026-12-06T08:33:49.737383+09:00', v: 1 } }]);
    await cache.commit(null);
    // The same instant, written as UTC: an update of the same record, not a second one.
    cache.apply([{ op: 'upsert', record: { at: '2026-12-05T23:33:49.737383Z', v: 2 } }]);
    await cache.commit(null);
    expect(cache.commitState().recordCount).toBe(1);
    expect(cache.get(['2026-12-05 18:33:49.737383-05:00'])).toEqual({
      at: '2026-12-05T23:33:49.737383Z',
      v: 2,
    });
    // Epoch milliseconds denote the same instants (the api-server reads digits in a URL key as a number).
    cache.apply([{ op: 'upsert', record: { at: Date.UTC(2026, 11, 5), v: 3 } }]);
    await cache.commit(null);
    expect(cache.get(['2026-12-05'])).toEqual({ at: '2026-12-05T00:00:00.000000Z', v: 3 });
    cache.apply([{ op: 'delete', key: ['2026-12-05T09:00:00+09:00'] }]);
    await cache.commit(null);
    expect(cache.commitState().recordCount).toBe(1);
  });

  it('refuses a timestamp operand that is not an ISO 8601 instant with INVALID_QUERY naming its path, and such a record with BAD_RECORD', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    await using cache = await caches.create({ endpoint: 'items', schema });
    const bad: Array<[Filter, string]> = [
      [{ ts: { $gt: 'yesterday' } }, '$filter.ts.$gt'],
      [{ ts: { $lt: '2026-13-01T00:00:00Z' } }, '$filter.ts.$lt'],
      [{ ts: { $in: ['2026-12-05T00:00:00Z', '2026-02-30'] } }, '$filter.ts.$in[1]'],
      [{ ts: 'Dec 5 2026' }, '$filter.ts'],
      [{ $or: [{ cat: 'a' }, { ts: { $ne: '2026-12-05T25:00:00Z' } }] }, '$filter.$or[1].ts.$ne'],
    ];
    for (const [filter, path] of bad) {
      const err = expectSluiceError(() => cache.count(filter), 'INVALID_QUERY');
      expect((err as InvalidQueryError).errors[0]?.path, JSON.stringify(filter)).toBe(path);
    }
    expectSluiceError(
      () => cache.apply([{ op: 'upsert', record: { id: 1, ts: 'Dec 5 2026' } }]),
      'BAD_RECORD',
    );
    expectSluiceError(
      () => cache.apply([{ op: 'upsert', record: { id: 1, ts: '0044-03-15T10:00:00+00 BC' } }]),
      'BAD_RECORD',
    );
  });

  it('a generation written before timestamps were canonical (record format 3) keeps serving but is rebuilt: writers refuse it when it has a timestamp field', async () => {
    await using dir = await tempDir();
    const names: Record<string, string> = {};
    {
      await using caches = await openCacheManager(dir.path);
      for (const [endpoint, fields] of [
        ['with', { id: 'integer', ts: 'timestamp' }],
        ['without', { id: 'integer', v: 'string' }],
      ] as const) {
        await using cache = await caches.create({
          endpoint,
          schema: { fields: { ...fields }, primaryKey: ['id'], indexes: [] },
        });
        names[endpoint] = cache.name;
        cache.apply([{ op: 'upsert', record: { id: 1 } }]);
        await cache.commit(null);
      }
    }
    for (const name of Object.values(names)) {
      const env = open({ path: join(dir.path, 'caches', name), maxDbs: 64 });
      const meta = env.openDB<Record<string, unknown>, string>({ name: 'meta' });
      expect(meta.get('schema')!.recordFormat).toBe(4);
      await meta.put('schema', { ...meta.get('schema')!, recordFormat: 3 });
      await env.close();
    }
    await using caches = await openCacheManager(dir.path);
    for (const name of Object.values(names)) {
      await using served = await caches.openRo(name);
      expect(served.get([1])).toEqual({ id: 1 });
    }
    // Timestamps stored as their source wrote them: the endpoint is rebuilt (CACHE_SCHEMA_MISMATCH).
    const err = await expectSluiceError(caches.openRw(names.with!), 'CACHE_SCHEMA_MISMATCH');
    expect(err.message).toMatch(/record format 3.*format 4 \(.*timestamps in UTC/);
    // No timestamp field: format 3 is what format 4 writes, so the generation is written on, not rebuilt.
    await using writable = await caches.openRw(names.without!);
    writable.apply([{ op: 'upsert', record: { id: 2, v: 'x' } }]);
    await writable.commit(null);
    expect(writable.commitState().recordCount).toBe(2);
  });
});
