/**
 * Page walks over `next` cursors while a real writer process commits between the pages, against an api-server
 * reading the same cache over real HTTP. `410 CURSOR_EXPIRED` is for a cursor of another generation (a blue/green
 * switch) only: a write between two pages never ends a walk, and a walk gives every record that exists throughout,
 * unchanged, exactly once.
 */
import { compareScalars, compileFilter, type Filter, type RecordOp, type SortDirection } from '@sluice/core';
import { type SeededRandom, seededRandom, type TempDir } from '@sluice/testkit';
import { afterEach, describe, expect, it } from 'vitest';
import type { ApiServer } from '../src/index.js';
import { type FeedWriter, startFeedApi, startFeedWriter, tempDir } from './feed-harness.js';

let dir: TempDir | undefined;
let writer: FeedWriter | undefined;
let api: ApiServer | undefined;

afterEach(async () => {
  await api?.close();
  await writer?.[Symbol.asyncDispose]();
  await dir?.remove();
  api = undefined;
  writer = undefined;
  dir = undefined;
});

type Row = { id: number } & Record<string, unknown>;

async function page(
  body: Record<string, unknown>,
): Promise<{ status: number; records: Row[]; next: string | null; problem: unknown }> {
  const response = await fetch(`${api!.url}/v1/endpoints/items/query`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await response.json()) as { records?: Row[]; next?: string | null };
  return { status: response.status, records: json.records ?? [], next: json.next ?? null, problem: json };
}

/** A JSON value whose text is longer than a cursor carries whole (48 characters): the cursor abbreviates it. */
const longTags = (id: number) => [`tag-${String(id).padStart(3, '0')}-${'x'.repeat(60)}`];

describe('cursor walks under writes (HTTP)', () => {
  it('defect: a walk ordered by a json field was refused 410 CURSOR_EXPIRED when the record its cursor pointed at was deleted', async () => {
    dir = await tempDir('sluice-api-cursor-walks-');
    const records = Array.from({ length: 10 }, (_, i) => ({
      id: i + 1,
      gen: 1,
      value: i,
      category: 'c',
      tags: longTags(i + 1),
    }));
    writer = await startFeedWriter(dir, { initial: records });
    api = await startFeedApi(writer.root);

    const body = { $order_by: { tags: 'asc' }, $limit: 4 };
    const first = await page(body);
    expect(first.status).toBe(200);
    expect(first.records.map((r) => r.id)).toEqual([1, 2, 3, 4]);
    expect(first.next).not.toBeNull();

    // The record the cursor points at goes away between the pages.
    await writer.run({ op: 'commit', ops: [{ op: 'delete', key: [4] }] });

    const second = await page({ ...body, $after: first.next });
    // The walk goes on after a delete (410 is for a cursor of another generation only).
    expect(second.status, JSON.stringify(second.problem)).toBe(200);
    const seen = [...second.records.map((r) => r.id)];
    let next = second.next;
    while (next !== null) {
      const more = await page({ ...body, $after: next });
      expect(more.status).toBe(200);
      seen.push(...more.records.map((r) => r.id));
      next = more.next;
    }
    // After the position, nothing skipped and nothing repeated.
    expect(seen).toEqual([5, 6, 7, 8, 9, 10]);
  });

  it('a seeded walk while a writer inserts, moves and deletes records between the pages skips and repeats none', {
    timeout: 180_000,
  }, async () => {
    dir = await tempDir('sluice-api-cursor-walks-');
    const rng = seededRandom(20260604);
    let lastId = 0;
    const truth = new Map<number, Record<string, unknown>>();
    const initial = Array.from({ length: 40 }, () => randomItem(rng, ++lastId));
    for (const record of initial) truth.set(record.id as number, record);
    writer = await startFeedWriter(dir, { initial });
    api = await startFeedApi(writer.root);

    let cursorWrites = 0;
    for (let w = 0; w < 8; w++) {
      const order = rng.pick(ORDERS);
      const filter = rng.pick(FILTERS);
      const body = { $filter: filter, $order_by: Object.fromEntries(order), $limit: rng.int(1, 5) };
      const where = `walk ${w}: ${JSON.stringify(body)}`;
      const matches = compileFilter(filter);
      const compare = comparator(order);
      const start = new Map(truth);
      const touchedAt = new Map<number, number>();
      const lastSeenPage = new Map<number, number>();
      const seen: Row[] = [];
      let after: string | null = null;
      for (let p = 0; p < 200; p++) {
        const answer = await page({ ...body, ...(after === null ? {} : { $after: after }) });
        expect(answer.status, `${where} page ${p}: ${JSON.stringify(answer.problem)}`).toBe(200);
        for (const record of answer.records) {
          expect(matches(record), `${where}: ${record.id} does not match`).toBe(true);
          const previous = seen[seen.length - 1];
          if (previous)
            expect(compare(previous, record), `${where}: ${record.id} after ${previous.id}`).toBeLessThan(0);
          const before = lastSeenPage.get(record.id);
          if (before !== undefined)
            expect((touchedAt.get(record.id) ?? -1) >= before, `${where}: ${record.id} twice unwritten`).toBe(
              true,
            );
          lastSeenPage.set(record.id, p);
          seen.push(record);
        }
        after = answer.next;
        if (after === null) break;
        const cursorId = answer.records[answer.records.length - 1]?.id;
        const ops: RecordOp[] = [];
        if (cursorId !== undefined && rng.chance(0.6)) {
          ops.push(
            rng.chance(0.5)
              ? { op: 'delete', key: [cursorId] }
              : { op: 'upsert', record: randomItem(rng, cursorId) },
          );
          cursorWrites += 1;
        }
        const ids = [...truth.keys()];
        if (rng.chance(0.5)) ops.push({ op: 'upsert', record: randomItem(rng, ++lastId) });
        if (rng.chance(0.3)) ops.push({ op: 'delete', key: [rng.pick(ids)] });
        if (rng.chance(0.3)) ops.push({ op: 'upsert', record: randomItem(rng, rng.pick(ids)) });
        if (ops.length === 0) continue;
        await writer.run({ op: 'commit', ops });
        for (const op of ops) {
          const id = (op.op === 'delete' ? op.key[0] : op.op === 'upsert' ? op.record.id : null) as number;
          if (op.op === 'delete') truth.delete(id);
          else if (op.op === 'upsert') truth.set(id, op.record);
          touchedAt.set(id, p);
        }
      }
      expect(after, `${where}: the walk did not end`).toBeNull();
      for (const [id, record] of start) {
        if (touchedAt.has(id) || !matches(record)) continue;
        expect(seen.filter((r) => r.id === id).length, `${where}: ${id} (unchanged throughout)`).toBe(1);
      }
    }
    expect(cursorWrites).toBeGreaterThan(5);
  });
});

type Rng = SeededRandom;

/** Longer than an index key component's budget (keys truncated) and than what a cursor carries whole (48). */
const LONG = 'L'.repeat(1_200);
const MID = 'm'.repeat(60);
const CATEGORIES = ['a', 'b', MID, `${MID}a`, `${MID}b`, LONG, `${LONG}a`, `${LONG}b`];
const TAGS: unknown[] = [[], ['x'], [MID], [`${MID}a`], { k: `${MID}b` }, [LONG], [`${LONG}a`, 1]];

function randomItem(rng: Rng, id: number): Record<string, unknown> {
  return {
    id,
    gen: 1,
    value: rng.pick([0, 1, 2, 3, 4.5]),
    category: rng.pick(CATEGORIES),
    tags: rng.pick(TAGS),
  };
}

const ORDERS: Array<Array<[string, SortDirection]>> = [
  [['tags', 'asc']],
  [['tags', 'desc']],
  [['category', 'asc']],
  [['category', 'desc']],
  [
    ['category', 'desc'],
    ['value', 'desc'],
  ],
  [['value', 'asc']],
];
const FILTERS: Filter[] = [{}, { value: { $gte: 1 } }, { category: { $ne: 'a' } }];

/** The documented order: the fields (a missing one is null), then the primary key in the last field's direction. */
function comparator(order: Array<[string, SortDirection]>) {
  const tie: SortDirection = order.length > 0 ? order[order.length - 1]![1] : 'asc';
  const parts = [...order, ['id', tie] as [string, SortDirection]];
  return (a: Record<string, unknown>, b: Record<string, unknown>) => {
    for (const [field, direction] of parts) {
      const c = compareScalars(a[field] ?? null, b[field] ?? null);
      if (c !== 0) return direction === 'desc' ? -c : c;
    }
    return 0;
  };
}
