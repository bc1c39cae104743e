/**
 * Page walks over values whose index keys are truncated (strings longer than their share of LMDB's key limit: a
 * prefix + hash, re-sorted by their real values while scanned), against a real api-server process reading a cache a
 * real writer process wrote. Every walk with `next` must give each matching record exactly once, in the documented
 * order, however the page boundaries fall among such values and whatever `cache.scanCap` is.
 */
import { join } from 'node:path';
import { type TempDir, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FeedWriter, startFeedWriter } from './feed-harness.js';
import { type SpawnedApiServer, spawnApiServer, writeConfig } from './helpers.js';

/** Small, so that a walk's pages cross the cap inside runs of truncated keys. */
const SCAN_CAP = 10;
/** Longer than any key component's budget (at most 961 bytes): these values are stored truncated. */
const LONG = 'L'.repeat(1_200);
const RECORDS = 40;

/** Every fourth record has a long category sharing one prefix (one run of truncated keys), the rest short ones. */
function record(id: number): Record<string, unknown> {
  const suffix = String(id).padStart(3, '0');
  return { id, gen: 1, value: id % 7, category: id % 4 === 0 ? `${LONG}${suffix}` : `c${suffix}`, tags: [] };
}

type Row = { id: number; value: number; category: string };

/** The documented order, written out: category (UTF-16 code units), then value, then id, all in `direction`. */
function reference(rows: Row[], direction: 'asc' | 'desc'): number[] {
  const sign = direction === 'asc' ? 1 : -1;
  const cmp = (a: string | number, b: string | number) => (a < b ? -1 : a > b ? 1 : 0);
  return [...rows]
    .sort((a, b) => sign * (cmp(a.category, b.category) || cmp(a.value, b.value) || cmp(a.id, b.id)))
    .map((r) => r.id);
}

let dir: TempDir;
let writer: FeedWriter;
let api: SpawnedApiServer;

beforeAll(async () => {
  dir = await tempDir('sluice-api-long-keys-');
  writer = await startFeedWriter(dir, {
    initial: Array.from({ length: RECORDS }, (_, i) => record(i + 1)),
  });
  const config = await writeConfig(dir.path, {
    dataDir: join(dir.path, 'data'),
    logLevel: 'info',
    cache: { scanCap: SCAN_CAP },
  });
  api = await spawnApiServer(config);
}, 120_000);

afterAll(async () => {
  await api?.[Symbol.asyncDispose]();
  await writer?.[Symbol.asyncDispose]();
  await dir?.remove();
});

/** Follows `next` from the first page (at most `guard` pages) and returns the ids in the order answered. */
async function walk(body: Record<string, unknown>, guard = 200): Promise<{ ids: number[]; pages: number }> {
  const ids: number[] = [];
  let after: string | null = null;
  let pages = 0;
  while (pages < guard) {
    const response = await fetch(`${api.url}/v1/endpoints/items/query`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, ...(after === null ? {} : { $after: after }) }),
    });
    expect(response.status, JSON.stringify(body)).toBe(200);
    const page = (await response.json()) as { records: Row[]; next: string | null };
    pages += 1;
    ids.push(...page.records.map((r) => r.id));
    after = page.next;
    if (after === null) break;
  }
  return { ids, pages };
}

describe('page walks over truncated index keys', () => {
  it('defect: a walk whose page ended in a run of truncated keys never finished (ascending: empty pages forever once the run outgrew cache.scanCap; descending: records repeated forever)', async () => {
    const rows = Array.from({ length: RECORDS }, (_, i) => record(i + 1) as Row);
    for (const direction of ['asc', 'desc'] as const) {
      for (const limit of [1, 3, 7]) {
        const { ids } = await walk({ $order_by: { category: direction, value: direction }, $limit: limit });
        expect(ids, `${direction}, $limit ${limit}`).toEqual(reference(rows, direction));
      }
    }
  });
});
