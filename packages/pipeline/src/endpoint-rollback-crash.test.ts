/**
 * A rollback is one step: the process dying right after the alias moved must not leave the generation the rollback
 * abandoned for a restart to pick up again. The death is reached deterministically with a catalog whose writes all
 * fail once the rollback's redirect has been written — what a SIGKILL between two alias-table writes leaves — over
 * real LMDB files; the restart is a fresh endpoint over a freshly opened cache manager on the same data root.
 */
import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { WritableCacheCatalog } from '@sluice/core';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startEndpointPipeline } from './endpoint.js';

const rows = (n: number, from = 1) =>
  Array.from(
    { length: n },
    (_, i) => `${JSON.stringify({ id: from + i, value: from + i, category: 'a' })}\n`,
  ).join('');

const endpoint = (path: string) => ({
  name: 'items',
  source: { type: 'file' as const, path, format: 'jsonl' as const, follow: true },
  primaryKey: ['id'],
  fields: { id: 'integer' as const, value: 'number' as const, category: 'string' as const },
  indexes: [] as string[][],
  switch: { mode: 'manual' as const },
});

const noEvents = { publish: async () => {} };

/**
 * `caches` as the catalog of a process that dies right after a rollback's redirect is written: from then on every
 * write (and every open for writing) fails, reads still answer. Only the catalog's write surface is touched.
 */
function diesAfterRollbackRedirect(caches: WritableCacheCatalog) {
  const state = { died: false };
  const write = async <T>(op: () => Promise<T>): Promise<T> => {
    if (state.died) throw new Error('the process died right after the rollback moved the alias');
    return op();
  };
  const catalog: WritableCacheCatalog = {
    openRo: (name) => caches.openRo(name),
    resolveAlias: (alias) => caches.resolveAlias(alias),
    listAliases: () => caches.listAliases(),
    aliasTableVersion: () => caches.aliasTableVersion(),
    list: () => caches.list(),
    info: (name) => caches.info(name),
    history: (alias) => caches.history(alias),
    close: async () => {},
    [Symbol.asyncDispose]: async () => {},
    create: (input) => write(() => caches.create(input)),
    openRw: (name, schema) => write(() => caches.openRw(name, schema)),
    annotate: (name, notes) => write(() => caches.annotate(name, notes)),
    retire: (name) => write(() => caches.retire(name)),
    redirect: (alias, to, options) =>
      write(async () => {
        const moved = await caches.redirect(alias, to, options);
        if (options?.cause === 'rollback') state.died = true;
        return moved;
      }),
  };
  return { catalog, state };
}

describe('rollback and a crash right after the alias moved', () => {
  it('defect: a process killed between the rollback redirect and the retires restarted feeding the abandoned green (held again, promotable) while the rolled-back generation stood still', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    const root = join(dir.path, 'data');
    await writeFile(path, rows(50));
    let blue: string;
    let abandoned: string;
    {
      await using caches = await openCacheManager(root, { gcGraceMs: 3_600_000 });
      const dying = diesAfterRollbackRedirect(caches);
      await using pipeline = await startEndpointPipeline(endpoint(path), {
        caches: dying.catalog,
        events: noEvents,
        connections: {},
      });
      blue = await pipeline.whenServing();
      await pipeline.rebuild();
      const green = (await waitFor(() => pipeline.status().held, { what: 'the first green held' })).cache;
      await pipeline.promote(green);
      // A second green is held when the operator rolls back to blue: the rollback abandons it.
      await pipeline.rebuild();
      abandoned = (
        await waitFor(
          () => {
            const held = pipeline.status().held;
            return held !== null && held.cache !== green ? held : null;
          },
          { what: 'the second green held' },
        )
      ).cache;
      // Whether the dying process still answers is beside the point: what the alias table kept is.
      await pipeline.rollback(blue, green).catch(() => {});
      expect(dying.state.died).toBe(true);
      expect(caches.resolveAlias('items')?.cache).toBe(blue);
    }

    // The restart: a new manager over the same files, a fresh endpoint.
    await using caches = await openCacheManager(root, { gcGraceMs: 3_600_000 });
    await using pipeline = await startEndpointPipeline(endpoint(path), {
      caches,
      events: noEvents,
      connections: {},
    });
    // Started: the run is planned. It must feed the rolled-back generation, with nothing else left building.
    expect({
      abandoned: (await caches.info(abandoned))?.state,
      serving: pipeline.status().servingCache,
      building: pipeline.status().buildingCache,
    }).toEqual({ abandoned: 'retired', serving: blue, building: null });
    expect(pipeline.decision.reason).toContain(`continuing in place in ${blue}`);
    expect(await pipeline.whenServing()).toBe(blue);
    // The rolled-back generation is the one fed: it follows its source; the abandoned green does not move.
    const abandonedRecords = (await caches.info(abandoned))?.recordCount;
    await appendFile(path, rows(5, 51));
    await waitFor(async () => (await caches.info(blue))?.recordCount === 55, {
      what: 'the rolled-back generation to follow its source',
    });
    expect((await caches.info(abandoned))?.recordCount).toBe(abandonedRecords);
    expect(caches.resolveAlias('items')?.cache).toBe(blue);
    expect(caches.history('items')[0]).toMatchObject({ to: blue, cause: 'rollback' });
  }, 30_000);
});
