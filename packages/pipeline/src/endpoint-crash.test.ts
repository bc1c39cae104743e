import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { openCacheManager } from '@sluice/cache';
import { spawnTs, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../test/helpers.js';

const CHILD = fileURLToPath(new URL('../test/fixtures/endpoint-child.ts', import.meta.url));
const BLUE = 2_000;
const GREEN = 12_000;
const KILLS = 4;

const rows = (n: number, tag: string) =>
  Array.from({ length: n }, (_, i) => ({ id: i, value: i % 97, category: `${tag}${i % 5}` }));
const jsonl = (records: object[]) => records.map((r) => `${JSON.stringify(r)}\n`).join('');

describe('endpoint pipeline crash safety', () => {
  it('SIGKILLed at random points of a rebuild, it never exposes a partial generation and ends equal to the source', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    const path = join(dir.path, 'items.jsonl');
    const input = (extra: object = {}) =>
      JSON.stringify({
        root,
        endpoint: {
          name: 'items',
          source: { type: 'file', path, format: 'jsonl' },
          primaryKey: ['id'],
          fields: { id: 'integer', value: 'number', category: 'string' },
          indexes: [['value'], ['category', 'value']],
        },
        commitEveryRecords: 600,
        fileChunkBytes: 8192,
        ...extra,
      });

    await writeFile(path, jsonl(rows(BLUE, 'a')));
    {
      await using child = spawnTs(CHILD, [input()]);
      await child.waitForLine(/^SERVING /, 60_000);
    }

    // A reader in this process watches the alias the whole time: whatever it points at must be complete.
    await using reader = await openCacheManager(root, { readOnly: true });
    const blue = reader.resolveAlias('items')!.cache;
    const seen = new Map<string, Set<number>>();
    let watching = true;
    const watcher = (async () => {
      // Like an api-server: keep the generation the alias points at open, and switch when the alias moves.
      let cache: Awaited<ReturnType<typeof reader.openRo>> | null = null;
      try {
        while (watching) {
          const target = reader.resolveAlias('items');
          if (target && cache?.name !== target.cache) {
            await cache?.close();
            cache = null;
            cache = await reader.openRo('items');
          }
          if (cache) {
            const count = cache.count({});
            const counts = seen.get(cache.name) ?? new Set<number>();
            seen.set(cache.name, counts);
            counts.add(count);
          }
          await new Promise((r) => setTimeout(r, 5));
        }
      } finally {
        await cache?.close();
      }
    })();

    await writeFile(path, jsonl(rows(GREEN, 'b')));
    const decisions: string[] = [];
    const redirectEvents: string[] = [];
    const epochsPerRun = GREEN / 600;
    for (let k = 0; k < KILLS; k++) {
      await using child = spawnTs(CHILD, [input()]);
      let exited = false;
      void child.exited.then(() => {
        exited = true;
      });
      const target = 1 + Math.floor(Math.random() * Math.floor(epochsPerRun / (KILLS + 1)));
      await waitFor(() => exited || child.lines.filter((l) => l.startsWith('EPOCH ')).length > target, {
        timeoutMs: 60_000,
        intervalMs: 2,
        what: `epoch ${target}`,
      });
      await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 10)));
      child.kill('SIGKILL');
      await child.exited;
      decisions.push(...child.lines.filter((l) => l.startsWith('DECISION ')));
      redirectEvents.push(...child.lines.filter((l) => l.includes('"AliasRedirected"')));
    }
    // Until a run finishes the snapshot, the alias stays on blue.
    expect(reader.resolveAlias('items')?.cache).toBe(blue);

    await using last = spawnTs(CHILD, [input()]);
    const serving = (await last.waitForLine(/^SERVING /, 90_000)).slice('SERVING '.length);
    decisions.push(...last.lines.filter((l) => l.startsWith('DECISION ')));
    redirectEvents.push(...last.lines.filter((l) => l.includes('"AliasRedirected"')));
    await waitFor(() => seen.get(serving)?.has(GREEN), { what: 'reader sees the green generation' });
    watching = false;
    await watcher;

    // Later starts continued the interrupted green build instead of starting yet another generation.
    expect(decisions.slice(1).some((d) => d.includes('continuing the rebuild'))).toBe(true);
    expect(serving).not.toBe(blue);
    expect(redirectEvents).toHaveLength(1);
    // Every generation a reader was ever pointed at was complete.
    expect([...(seen.get(blue) ?? [])]).toEqual([BLUE]);
    expect([...(seen.get(serving) ?? [])]).toEqual([GREEN]);
    expect([...seen.keys()].sort()).toEqual([blue, serving].sort());

    // The final cache equals the source exactly.
    const cache = await reader.openRo('items');
    try {
      expect(cache.count({})).toBe(GREEN);
      expect(allRecords(cache)).toEqual(rows(GREEN, 'b'));
    } finally {
      await cache.close();
    }
  });
});
