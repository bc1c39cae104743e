/**
 * An endpoint that follows a file (`follow: true`) serves what the file holds. Log files get rotated under it —
 * renamed away and replaced by a new file, or copied and truncated in place (logrotate's `copytruncate`) and written
 * again — and the new content may be longer than what was read already. The file at the path is then another file:
 * its records must be served as a new generation built from its first line, never read from the old byte offset
 * (which starts mid-line in the new content and skips every record before it).
 */
import { copyFile, rename, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startNodeProcess, writeRecords } from './helpers.js';

/** JSONL records with ids `from`..`to`, one line each. */
function lines(from: number, to: number): string {
  const out: string[] = [];
  for (let id = from; id <= to; id++) out.push(JSON.stringify({ id, value: id * 1.5, category: 'a' }));
  return `${out.join('\n')}\n`;
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** Sorted ids as runs (`1–200, 1187–1400`), so a failure reads at a glance. */
function runs(ids: number[]): string {
  const out: string[] = [];
  for (let i = 0; i < ids.length; ) {
    let j = i;
    while (j + 1 < ids.length && ids[j + 1] === ids[j]! + 1) j++;
    out.push(i === j ? `${ids[i]}` : `${ids[i]}–${ids[j]}`);
    i = j + 1;
  }
  return out.join(', ');
}

describe('a followed file rotated under its endpoint', { timeout: 120_000 }, () => {
  it('defect: a followed file replaced by rotation (rename + new file, or copytruncate) was read on from the old byte offset: the new file’s first records lost, a cut line read as a bad record', async () => {
    await using dir = await tempDir('sluice-follow-rotation-');
    const source = await writeRecords(join(dir.path, 'logs', 'items.jsonl'), 200);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      extraYaml: [
        'endpoints:',
        '  - name: items',
        `    source: { type: file, path: "${source}", format: jsonl, follow: true }`,
        '    primaryKey: [id]',
        '    fields: { id: integer, value: number, category: string }',
      ].join('\n'),
    });

    /** The endpoint once it has committed its file to the end with nothing building, not serving `before`. */
    const settled = (before: number[]) =>
      waitFor(
        async () => {
          const reply = await call(`${node.url}/v1/endpoints`);
          const items = reply.body.endpoints.find((e: { name: string }) => e.name === 'items');
          if (!items?.servingCache || items.buildingCache !== null || items.lag !== 0) return null;
          if (items.phase !== 'streaming') return null;
          // Committed up to the file's end (the checkpoint is committed with the records it covers).
          const size = (await stat(source)).size;
          if (items.checkpoint?.positions?.['items.source']?.offset !== size) return null;
          const served = await servedIds();
          return served.join() === before.join() ? null : { items, served };
        },
        { timeoutMs: 60_000, intervalMs: 200, what: 'the endpoint to read the rotated file to its end' },
      );
    const servedIds = async (): Promise<number[]> => {
      const reader = await openCacheManager(join(dir.path, 'node', 'data'), { readOnly: true });
      try {
        const cache = await reader.openRo('items');
        try {
          // Every id any version of the file held, and the count: an id read from a cut line shows as extra.
          const present = [...range(1, 200), ...range(1001, 1400), ...range(2001, 2600)].filter(
            (id) => cache.get([id]) !== undefined,
          );
          const total = cache.count();
          return total === present.length ? present : [-(total - present.length), ...present];
        } finally {
          await cache.close();
        }
      } finally {
        await reader.close();
      }
    };

    const first = await settled([]);
    expect(runs(first.served)).toBe('1–200');

    // Rotation by rename: the old file moves away, a new, longer one takes its path (written whole, then renamed
    // in, so the follower never sees it half-written).
    await rename(source, `${source}.1`);
    await writeFile(`${source}.new`, lines(1001, 1400));
    await rename(`${source}.new`, source);
    const renamed = await settled(first.served);
    expect({ served: runs(renamed.served), bad: renamed.items.badRecords.count }).toEqual({
      served: '1001–1400',
      bad: 0,
    });

    // Rotation by copytruncate: the file is copied, cut to nothing in place, and written again past the offset.
    await copyFile(source, `${source}.2`);
    await truncate(source, 0);
    await writeFile(source, lines(2001, 2600), { flag: 'a' });
    const truncated = await settled(renamed.served);
    expect({ served: runs(truncated.served), bad: truncated.items.badRecords.count }).toEqual({
      served: '2001–2600',
      bad: 0,
    });
  });
});
