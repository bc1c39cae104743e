/**
 * The `cache` section of sluice.yaml reaches the cache writers the app-server opens: `cache.stagedInMemory` bounds
 * how many staged changes of one source transaction a writer holds in memory (the rest wait in the generation's
 * staging area on disk until the commit).
 */
import { resolveConfig } from '@sluice/core';
import { capturingLogger, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { openServingPlane } from '../src/serving.js';

const schema = { fields: { id: 'integer' as const }, primaryKey: ['id'], indexes: [] };
const noEvents = { publish: async () => {} };

/** Stages 50 upserts in one apply on a new generation of a serving plane opened with `cache`; commits them. */
async function stageFifty(cache: Record<string, unknown>) {
  await using dir = await tempDir();
  const serving = await openServingPlane(resolveConfig({ dataDir: dir.path, cache }), {
    events: noEvents,
    logger: capturingLogger(),
    cwd: dir.path,
  });
  try {
    const generation = await serving.caches.create({ endpoint: 'items', schema });
    generation.apply(
      Array.from({ length: 50 }, (_, i) => ({ op: 'upsert' as const, record: { id: i + 1 } })),
    );
    const heldInMemory = generation.pendingCount;
    await generation.commit({ dag: 'd', epoch: 1, positions: {}, at: new Date().toISOString() });
    return { heldInMemory, committed: generation.commitState().recordCount };
  } finally {
    await serving.close();
  }
}

describe('cache settings from sluice.yaml', () => {
  it('cache.stagedInMemory bounds the staged changes a writer holds in memory; the transaction still commits whole', async () => {
    expect(await stageFifty({ stagedInMemory: 5 })).toEqual({ heldInMemory: 0, committed: 50 });
    // The default (10 000) holds all fifty.
    expect(await stageFifty({})).toEqual({ heldInMemory: 50, committed: 50 });
  });

  it('cache.stagedInMemory below 1 is refused by the configuration', () => {
    expect(() => resolveConfig({ cache: { stagedInMemory: 0 } })).toThrow(/cache\.stagedInMemory/);
  });
});
