/**
 * A query no index answers in its order is sorted in memory after a scan of at most `cache.scanCap` records. When the
 * scan stops at the cap, the records it did not see may come first: such a query is refused (400 INVALID_QUERY at
 * `$order_by`, naming the way out), never answered with rows that are not the first of the order asked for.
 * A capped scan in an index's order (a filter no index answers) still answers a page and a `next` that continues it.
 */
import { type TempDir, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiServer } from '../src/index.js';
import { CATEGORIES } from './fixtures/data.js';
import { startQuietApiServer, writeGeneration } from './helpers.js';

const RECORDS = 50;
const SCAN_CAP = 20;

let dir: TempDir;
let server: ApiServer;

beforeAll(async () => {
  dir = await tempDir('sluice-api-scan-cap-');
  // Records 1..50: `category` is CATEGORIES[id % 3], `value` is the id; indexes [value] and [category, value].
  await writeGeneration(dir.path, 1, RECORDS);
  server = await startQuietApiServer(dir.path, { cache: { scanCap: SCAN_CAP } });
}, 90_000);

afterAll(async () => {
  await server?.close();
  await dir?.remove();
});

async function query(body: unknown) {
  const response = await fetch(`${server.url}/v1/endpoints/items/query`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

async function count(filter: unknown) {
  const response = await fetch(`${server.url}/v1/endpoints/items/count`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ $filter: filter }),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

const idsOf = (json: Record<string, unknown>) => (json.records as Array<{ id: number }>).map((r) => r.id);

/** Ids 1..`upTo` in `{category: asc, id: desc}` order. */
function byCategoryThenIdDescending(upTo: number): number[] {
  const ids = Array.from({ length: upTo }, (_, i) => i + 1);
  return ids.sort((a, b) => CATEGORIES[a % 3]!.localeCompare(CATEGORIES[b % 3]!) || b - a);
}

describe('queries beyond the scan cap', () => {
  it('defect: an in-memory sort whose scan stopped at cache.scanCap answered rows that are not the first of its order', async () => {
    // No index gives category-then-id-descending order: the records are scanned (at most 20) and sorted.
    const answer = await query({ $order_by: { category: 'asc', id: 'desc' }, $limit: 3 });
    // Before: 200 with ids 18, 15, 12 (the first of the 20 records scanned), where the order starts 48, 45, 42.
    expect(byCategoryThenIdDescending(RECORDS).slice(0, 3)).toEqual([48, 45, 42]);
    expect({ status: answer.status, code: answer.json.code }).toEqual({ status: 400, code: 'INVALID_QUERY' });
    const errors = answer.json.errors as Array<{ path: string; message: string }>;
    expect(errors.map((e) => e.path)).toEqual(['$order_by']);
    expect(errors[0]!.message).toMatch(/index/);
    expect(errors[0]!.message).toMatch(/scanCap/);
  });

  it('answers an in-memory sort whose filter keeps the scan within the cap, in order, with a working cursor', async () => {
    // The [value] index narrows the scan to 15 records (values 1..15): all of them are seen, then sorted.
    const body = { $filter: { value: { $lte: 15 } }, $order_by: { category: 'asc', id: 'desc' }, $limit: 3 };
    const first = await query(body);
    expect(first.status).toBe(200);
    expect(idsOf(first.json)).toEqual(byCategoryThenIdDescending(15).slice(0, 3));
    const second = await query({ ...body, $after: first.json.next });
    expect(second.status).toBe(200);
    expect(idsOf(second.json)).toEqual(byCategoryThenIdDescending(15).slice(3, 6));
  });

  it('still pages a capped scan in index order: every matching record once, through next', async () => {
    // `tags` has no index: the primary index is scanned, 20 records per request at most.
    const body = { $filter: { tags: { $contains: 't1' } }, $limit: 100 };
    const found: number[] = [];
    let after: unknown = null;
    for (let request = 0; request < 10; request += 1) {
      const page = await query(after === null ? body : { ...body, $after: after });
      expect(page.status).toBe(200);
      found.push(...idsOf(page.json));
      after = page.json.next;
      if (after === null) break;
    }
    expect(found).toEqual(Array.from({ length: RECORDS }, (_, i) => i + 1).filter((id) => id % 5 === 1));
  });

  it('defect: a count whose filter no index answers scanned every record, past cache.scanCap (the api-server held for the whole scan)', async () => {
    // `tags` has no index: all 50 records would be examined for a count, with a cap of 20.
    const answer = await count({ tags: { $contains: 't1' } });
    // Before: 200 {count: 10}, after examining all 50 records (5M records: seconds of a stopped event loop).
    expect({ status: answer.status, code: answer.json.code }).toEqual({ status: 400, code: 'INVALID_QUERY' });
    const errors = answer.json.errors as Array<{ path: string; message: string }>;
    expect(errors.map((e) => e.path)).toEqual(['$filter']);
    expect(errors[0]!.message).toMatch(/scanCap \(20\)/);
    expect(errors[0]!.message).toMatch(/index/);
  });

  it('counts what an index answers whole beyond the cap, and a residual filter an index narrows within it', async () => {
    // The [value] index answers `value >= 1` exactly: 50 records counted without examining them.
    expect(await count({ value: { $gte: 1 } })).toEqual({ status: 200, json: { count: 50 } });
    expect(await count({ value: { $gte: 11, $lt: 41 } })).toEqual({ status: 200, json: { count: 30 } });
    expect(await count({ value: { $in: [3, 7, 99, 7] } })).toEqual({ status: 200, json: { count: 2 } });
    // [category, value] narrows `category = c` to 16 or 17 records (within the cap); `tags` is checked on each.
    const category = CATEGORIES[1]!;
    const expected = Array.from({ length: RECORDS }, (_, i) => i + 1).filter(
      (id) => id % 3 === 1 && id % 5 === 1,
    ).length;
    expect(await count({ category, tags: { $contains: 't1' } })).toEqual({
      status: 200,
      json: { count: expected },
    });
    // No filter: the commit's record count.
    expect(await count({})).toEqual({ status: 200, json: { count: 50 } });
  });
});
