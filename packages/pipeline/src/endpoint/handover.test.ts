/**
 * The paths of a switch's hand-over (handover.ts, docs/generations.md § The switch hands over at a position) that a
 * process test cannot reach on purpose: the serving generation paused at a barrier the green then does not reach
 * within the wait. The serving one is paused once the green caught up with its last commit, and the barrier is what
 * it committed by the time the pause took effect — past the green only when a commit of the serving generation lands
 * between the check and the pause, a window of a few microtasks. Here the follower is a stand-in whose pause lets
 * exactly that commit land; the caches, their commits and the alias table are real LMDB.
 * (apps/app-server/test/switch-handover-wait.test.ts holds a real green back behind a proxy: the switch waits and a
 * promote answers 504 while the green is behind, without a pause.)
 */
import { openCacheManager } from '@sluice/cache';
import type { CacheSchema, PipelineCheckpoint, WritableCache } from '@sluice/core';
import { capturingLogger, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { createCacheSink } from '../sinks/cache.js';
import type { ReplicationPosition } from '../sources/replication/position.js';
import { type HandoverFollower, switchHandover } from './handover.js';

const schema: CacheSchema = { fields: { id: 'integer' }, primaryKey: ['id'], indexes: [] };
const PAUSE_MS = 300;

/** A checkpoint of `items.source` at `lsn`, as a replication run commits it. */
function at(lsn: string): PipelineCheckpoint {
  const position: ReplicationPosition = {
    capture: 'replication',
    slot: 's',
    publication: 's',
    phase: 'stream',
    lsn,
    lastKey: null,
    catchUp: null,
    columns: [['id', 23]],
    read: 0,
  };
  return { dag: 'items', epoch: 1, positions: { 'items.source': position }, at: new Date().toISOString() };
}

/** Commits one record into `cache` at `lsn`. */
async function commitAt(cache: WritableCache, id: number, lsn: string): Promise<void> {
  cache.apply([{ op: 'upsert', record: { id } }]);
  await cache.commit(at(lsn));
}

/**
 * The serving generation's follower: it committed `blue` up to `last`; `onPause` is what lands in the serving
 * generation while it is being paused (the commit that was under way), and every pause and resume is noted.
 */
function standInFollower(blue: WritableCache, last: { lsn: string }) {
  const calls: string[] = [];
  let onPause: (() => Promise<void>) | null = null;
  const follower: HandoverFollower = {
    lastCommitLsn: (generation) => (generation === blue.name ? last.lsn : null),
    async pause(generation) {
      calls.push(`pause ${generation}`);
      const landing = onPause;
      onPause = null;
      await landing?.();
    },
    async resume(generation) {
      calls.push(`resume ${generation}`);
    },
  };
  return {
    follower,
    calls,
    /** The next pause lets the serving generation commit at `lsn` first. */
    commitDuringNextPause(lsn: string) {
      onPause = async () => {
        await commitAt(blue, 2, lsn);
        last.lsn = lsn;
      };
    },
    /** The serving generation, following again, commits at `lsn`. */
    async follows(lsn: string) {
      await commitAt(blue, 3, lsn);
      last.lsn = lsn;
    },
  };
}

async function blueAndGreen(dir: string) {
  const caches = await openCacheManager(dir);
  const blue = await caches.create({ endpoint: 'items', schema });
  await commitAt(blue, 1, '0/150');
  await caches.redirect('items', blue.name);
  const green = await caches.create({ endpoint: 'items', schema });
  return { caches, blue, green };
}

/**
 * The green's cache sink whose hand-over pauses a stand-in follower of blue (last committed 0/150), with the logger
 * both write to; `holdReason` holds the green once its snapshot is done (manual switch mode).
 */
function greenSink(
  { caches, blue, green }: Awaited<ReturnType<typeof blueAndGreen>>,
  holdReason?: () => Promise<string | null>,
) {
  const logger = capturingLogger();
  const stand = standInFollower(blue, { lsn: '0/150' });
  const handover = switchHandover({
    endpoint: 'items',
    sourceHandle: 'items.source',
    caches,
    follower: stand.follower,
    logger,
    pauseMs: PAUSE_MS,
  });
  const sink = createCacheSink({
    handle: 'items.cache',
    endpoint: 'items',
    caches,
    cache: green,
    schema,
    sources: ['items.source'],
    logger,
    ...(holdReason ? { holdReason } : {}),
    handover: handover(green.name),
  });
  return { logger, stand, sink };
}

describe('the hand-over of a switch whose green does not reach the barrier in time', () => {
  it('the serving generation paused past the green follows again after the wait ("switch put off"), and the switch is made once the green reached it', async () => {
    await using dir = await tempDir();
    const { caches, blue, green } = await blueAndGreen(dir.path);
    await using _caches = caches;
    const { logger, stand, sink } = greenSink({ caches, blue, green });
    try {
      // The green's snapshot is done at 0/200, past the serving generation's 0/150: the serving one is paused — and a
      // commit of it at 0/300 lands meanwhile, so 0/300 is the barrier.
      stand.commitDuringNextPause('0/300');
      await commitAt(green, 1, '0/200');
      await sink.snapshotDone!('items.source', at('0/200'));
      expect(stand.calls).toEqual([`pause ${blue.name}`]);
      expect(caches.resolveAlias('items')?.cache).toBe(blue.name);

      // A green commit short of the barrier moves nothing.
      await sink.commit(at('0/250'));
      expect(caches.resolveAlias('items')?.cache).toBe(blue.name);

      // Past the wait the serving generation follows again.
      await waitFor(() => stand.calls.length === 2, {
        timeoutMs: 5_000,
        what: 'the paused generation to resume',
      });
      expect(stand.calls[1]).toBe(`resume ${blue.name}`);
      expect(logger.warnings().map((w) => w.msg)).toEqual([expect.stringMatching(/^switch put off: /)]);
      expect(logger.warnings()[0]!.fields).toMatchObject({
        from: blue.name,
        to: green.name,
        barrier: '0/300',
      });
      await stand.follows('0/400');

      // Behind what it serves now: the switch waits, the serving generation is not paused again.
      await sink.commit(at('0/350'));
      expect(stand.calls).toHaveLength(2);
      expect(caches.resolveAlias('items')?.cache).toBe(blue.name);

      // Caught up: paused (nothing lands this time), and the alias moves — to a position not before the last served.
      await sink.commit(at('0/400'));
      expect(stand.calls).toEqual([`pause ${blue.name}`, `resume ${blue.name}`, `pause ${blue.name}`]);
      expect(caches.resolveAlias('items')?.cache).toBe(green.name);
      expect(sink.redirected).toBe(true);
      expect(caches.history('items')[0]).toMatchObject({ from: blue.name, to: green.name, cause: 'rebuild' });
    } finally {
      await sink.close();
      await blue.close();
    }
  });

  it('a promote while the serving generation is paused past the held green answers ENDPOINT_TIMEOUT after the wait, the serving one follows again, and a later promote switches', async () => {
    await using dir = await tempDir();
    const { caches, blue, green } = await blueAndGreen(dir.path);
    await using _caches = caches;
    const { stand, sink } = greenSink({ caches, blue, green }, async () => 'switch mode is manual');
    try {
      await commitAt(green, 1, '0/200');
      await sink.snapshotDone!('items.source', at('0/200'));
      expect(sink.held).toBe('switch mode is manual');
      expect(stand.calls).toEqual([]);

      stand.commitDuringNextPause('0/300');
      const refused = await sink.promote().then(
        () => null,
        (err: unknown) => err,
      );
      expect(refused).toMatchObject({
        code: 'ENDPOINT_TIMEOUT',
        details: {
          endpoint: 'items',
          generation: green.name,
          committed: 'items.source=0/200',
          waitMs: PAUSE_MS,
        },
      });
      expect((refused as Error).message).toContain('switch.handoverWaitMs');
      // Nothing moved, the green is still held, and the serving generation was paused and follows again.
      expect(caches.resolveAlias('items')?.cache).toBe(blue.name);
      expect(sink.held).toBe('switch mode is manual');
      expect(stand.calls).toEqual([`pause ${blue.name}`, `resume ${blue.name}`]);
      expect(caches.history('items').some((h) => h.cause === 'promote')).toBe(false);

      // A green commit while held asks nothing (the promote was given up).
      await sink.commit(at('0/300'));
      expect(stand.calls).toHaveLength(2);
      expect(caches.resolveAlias('items')?.cache).toBe(blue.name);

      // Caught up with the serving generation's 0/300: a promote hands over at once.
      const moved = await sink.promote();
      expect(moved).toMatchObject({ from: blue.name, to: green.name });
      expect(caches.resolveAlias('items')?.cache).toBe(green.name);
      expect(stand.calls).toEqual([`pause ${blue.name}`, `resume ${blue.name}`, `pause ${blue.name}`]);
    } finally {
      await sink.close();
      await blue.close();
    }
  });
});
