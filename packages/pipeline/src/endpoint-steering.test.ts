/**
 * Generations an operator steers: gated switches hold a green generation (it keeps following its source, the
 * alias stays), promote moves the alias to it, rollback goes back to the previous generation and continues it from
 * its own checkpoint — or refuses, changing nothing, when its source cannot resume there.
 */
import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type CacheManagerOptions, openCacheManager } from '@sluice/cache';
import type { SluiceEvent } from '@sluice/core';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { startEndpointPipeline } from './endpoint.js';

const rows = (n: number, from = 1) =>
  Array.from(
    { length: n },
    (_, i) => `${JSON.stringify({ id: from + i, value: from + i, category: 'a' })}\n`,
  ).join('');

function collector() {
  const events: SluiceEvent[] = [];
  return { events, publish: async (event: SluiceEvent) => void events.push(event) };
}

const endpoint = (path: string, extra: Record<string, unknown> = {}) => ({
  name: 'items',
  source: { type: 'file' as const, path, format: 'jsonl' as const, follow: true },
  primaryKey: ['id'],
  fields: { id: 'integer' as const, value: 'number' as const, category: 'string' as const },
  indexes: [] as string[][],
  ...extra,
});

type Caches = Awaited<ReturnType<typeof openCacheManager>>;
const recordsOf = async (caches: Caches, name: string) => (await caches.info(name))?.recordCount ?? -1;
/** Waits until the alias `items` points at a generation other than `blue`, and returns its name. */
const servingOtherThan = (caches: Caches, blue: string, what: string) =>
  waitFor(
    () => {
      const serving = caches.resolveAlias('items')?.cache;
      return serving !== undefined && serving !== blue ? serving : null;
    },
    { what },
  );
/**
 * One test's world: the followed file `items.jsonl` holding `count` rows, and a cache manager over a data root
 * beside it; both go on dispose.
 */
async function fileWorld(count: number, cacheOptions: CacheManagerOptions = {}) {
  const dir = await tempDir();
  const path = join(dir.path, 'items.jsonl');
  await writeFile(path, rows(count));
  const caches = await openCacheManager(join(dir.path, 'data'), cacheOptions);
  return {
    path,
    caches,
    async [Symbol.asyncDispose]() {
      await caches[Symbol.asyncDispose]();
      await dir.remove();
    },
  };
}

/** The endpoint over `caches`, publishing to `events`. */
const start = (config: ReturnType<typeof endpoint>, caches: Caches, events = collector()) =>
  startEndpointPipeline(config, { caches, events, connections: {} });

const moves = (events: SluiceEvent[]) =>
  events.flatMap((e) => (e.type === 'AliasRedirected' ? [{ from: e.from, to: e.to, cause: e.cause }] : []));

describe('steered generations', () => {
  it('defect: a promote could not name the generation the operator saw held: once a second rebuild superseded it, the promote switched to the other one', async () => {
    await using world = await fileWorld(50);
    const { caches } = world;
    await using pipeline = await start(endpoint(world.path, { switch: { mode: 'manual' } }), caches);
    const blue = await pipeline.whenServing();
    await pipeline.rebuild();
    const first = (await waitFor(() => pipeline.status().held, { what: 'the first green held' })).cache;
    // Another operator rebuilds meanwhile: a second green is held, the first one is no longer fed.
    await pipeline.rebuild();
    const second = (
      await waitFor(
        () => {
          const held = pipeline.status().held;
          return held !== null && held.cache !== first ? held : null;
        },
        { what: 'the second green held' },
      )
    ).cache;
    // The operator confirms the promote of what they saw: refused, nothing moves.
    const refused = await pipeline.promote(first).catch((e: unknown) => e);
    expect(refused).toMatchObject({
      code: 'GENERATION_NOT_HELD',
      status: 409,
      details: { endpoint: 'items', generation: first, held: second },
    });
    expect(caches.resolveAlias('items')?.cache).toBe(blue);
    // Named right, it switches; repeated, it answers the same move unchanged; a stale name after it is refused.
    expect(await pipeline.promote(second)).toMatchObject({ from: blue, to: second, changed: true });
    expect(await pipeline.promote(second)).toMatchObject({ from: blue, to: second, changed: false });
    await expect(pipeline.promote(first)).rejects.toMatchObject({
      code: 'GENERATION_NOT_HELD',
      details: { held: null },
    });
    expect(caches.resolveAlias('items')?.cache).toBe(second);
  });

  it('manual mode holds a rebuilt generation (still following its source) until promote; promote is idempotent', async () => {
    await using world = await fileWorld(100);
    const { path, caches } = world;
    const events = collector();
    await using pipeline = await start(endpoint(path, { switch: { mode: 'manual' } }), caches, events);
    // The first generation has nothing to protect: it switches even in manual mode.
    const blue = await pipeline.whenServing();
    await expect(pipeline.promote()).rejects.toMatchObject({ code: 'NOTHING_TO_PROMOTE' });

    await pipeline.rebuild();
    const held = await waitFor(() => pipeline.status().held, { what: 'the rebuilt generation to be held' });
    expect(held.reason).toBe('manual switch mode: waiting for promote');
    expect(caches.resolveAlias('items')?.cache).toBe(blue);
    const green = held.cache;
    expect(green).not.toBe(blue);
    const notes = (await caches.info(green))!.notes;
    expect(notes.held?.reason).toBe(held.reason);
    expect(notes.snapshotDoneAt).toEqual(expect.any(String));
    expect(notes.cause).toBe('rebuild');
    expect(notes.decision?.decision).toBe('from-scratch');
    // Held, it keeps following its source; the alias does not move.
    await appendFile(path, rows(20, 101));
    await waitFor(async () => (await recordsOf(caches, green)) === 120, {
      what: 'the held generation to follow',
    });
    expect(caches.resolveAlias('items')?.cache).toBe(blue);

    expect(await pipeline.promote()).toEqual({
      endpoint: 'items',
      from: blue,
      to: green,
      cause: 'promote',
      changed: true,
    });
    expect(caches.resolveAlias('items')?.cache).toBe(green);
    expect(pipeline.status().held).toBeNull();
    expect(await pipeline.promote()).toEqual({
      endpoint: 'items',
      from: blue,
      to: green,
      cause: 'promote',
      changed: false,
    });
    // Promoted, it goes on following.
    await appendFile(path, rows(5, 121));
    await waitFor(async () => (await recordsOf(caches, green)) === 125, {
      what: 'the promoted generation to follow',
    });
    expect(moves(events.events)).toEqual([
      { from: null, to: blue, cause: 'restart' },
      { from: blue, to: green, cause: 'promote' },
    ]);
    expect(caches.history('items').map((h) => h.cause)).toEqual(['promote', 'restart']);
    expect((await caches.info(green))!.notes.held).toBeNull();
  }, 30_000);

  it('auto mode holds a green with too few records and switches one that passes the gate', async () => {
    await using world = await fileWorld(100);
    const { path, caches } = world;
    const events = collector();
    const config = endpoint(path, { switch: { mode: 'auto', minRecordRatio: 0.9, maxBadRecords: 0 } });
    await using pipeline = await start(config, caches, events);
    const blue = await pipeline.whenServing();

    // 95 ≥ 0.9 × 100: switches.
    await writeFile(path, rows(95));
    await pipeline.rebuild();
    const second = await servingOtherThan(caches, blue, 'the passing generation to switch');
    expect(moves(events.events).at(-1)).toEqual({ from: blue, to: second, cause: 'rebuild' });

    // 80 < 0.9 × 95: held, with the reason.
    await writeFile(path, rows(80));
    await pipeline.rebuild();
    const held = await waitFor(() => pipeline.status().held, { what: 'the short generation to be held' });
    expect(held.reason).toBe('80 records, fewer than 0.9 × 95 (the serving generation)');
    expect(caches.resolveAlias('items')?.cache).toBe(second);
    expect(await recordsOf(caches, held.cache)).toBe(80);

    // A bad record breaks maxBadRecords: 0.
    await writeFile(path, `${rows(100)}{"id": "not a number"}\n`);
    await pipeline.rebuild();
    const bad = await waitFor(() => pipeline.status().held, {
      what: 'the generation with a bad record to be held',
    });
    expect(bad.cache).not.toBe(held.cache);
    expect(bad.reason).toBe('1 bad records, more than the 0 allowed');
    expect(caches.resolveAlias('items')?.cache).toBe(second);
    expect(moves(events.events)).toHaveLength(2);
  }, 30_000);

  it('a held generation stays held across a restart, and promote then switches it', async () => {
    await using world = await fileWorld(50);
    const { path, caches } = world;
    const config = endpoint(path, { switch: { mode: 'manual' } });
    let blue: string;
    let green: string;
    {
      await using pipeline = await start(config, caches);
      blue = await pipeline.whenServing();
      await pipeline.rebuild();
      green = (await waitFor(() => pipeline.status().held, { what: 'held' })).cache;
    }
    const events = collector();
    await using pipeline = await start(config, caches, events);
    const held = await waitFor(() => pipeline.status().held, { what: 'held after the restart' });
    expect(held).toEqual({ cache: green, reason: 'manual switch mode: waiting for promote' });
    expect(pipeline.decision.decision).toBe('resume');
    expect(caches.resolveAlias('items')?.cache).toBe(blue);
    expect((await pipeline.promote()).to).toBe(green);
    expect(moves(events.events)).toEqual([{ from: blue, to: green, cause: 'promote' }]);
  }, 30_000);

  it("defect: a generation's reason for being built was overwritten by each later restart's decision", async () => {
    await using world = await fileWorld(20);
    const { path, caches } = world;
    const config = endpoint(path);
    let blue: string;
    let built: string;
    {
      await using pipeline = await start(config, caches);
      blue = await pipeline.whenServing();
      built = pipeline.decision.reason;
      expect((await caches.info(blue))!.notes.built).toBe(built);
    }
    await using pipeline = await start(config, caches);
    await pipeline.whenServing();
    expect(pipeline.decision.decision).toBe('resume');
    const notes = (await caches.info(blue))!.notes;
    // The latest decision is the resume; why the generation exists is still the first run's reason.
    expect({ decision: notes.decision?.decision, built: notes.built }).toEqual({ decision: 'resume', built });
  }, 30_000);

  it('rollback returns to the previous generation and continues it from its own checkpoint; repeating it changes nothing', async () => {
    await using world = await fileWorld(100, { gcGraceMs: 3_600_000 });
    const { path, caches } = world;
    const events = collector();
    await using pipeline = await start(endpoint(path), caches, events);
    await expect(pipeline.rollback()).rejects.toMatchObject({ code: 'NOTHING_TO_ROLL_BACK' });
    const blue = await pipeline.whenServing();
    await pipeline.rebuild();
    const green = await servingOtherThan(caches, blue, 'the rebuild to switch');
    await appendFile(path, rows(10, 101));
    await waitFor(async () => (await recordsOf(caches, green)) === 110, { what: 'green to follow' });
    // Blue stopped at 100 when the rebuild started.
    expect(await recordsOf(caches, blue)).toBe(100);

    expect(await pipeline.rollback()).toEqual({
      endpoint: 'items',
      from: green,
      to: blue,
      cause: 'rollback',
      changed: true,
    });
    expect(caches.resolveAlias('items')?.cache).toBe(blue);
    expect(pipeline.decision).toMatchObject({ decision: 'resume' });
    // Continued from its checkpoint: it catches up with what it missed, and follows on.
    await waitFor(async () => (await recordsOf(caches, blue)) === 110, { what: 'blue to catch up' });
    await appendFile(path, rows(5, 111));
    await waitFor(async () => (await recordsOf(caches, blue)) === 115, { what: 'blue to follow' });
    expect(await recordsOf(caches, green)).toBe(110);
    expect((await caches.info(green))!.state).toBe('retired');

    expect(await pipeline.rollback()).toMatchObject({ from: green, to: blue, changed: false });
    expect(await pipeline.rollback(blue)).toMatchObject({ to: blue, changed: false });
    expect(moves(events.events)).toEqual([
      { from: null, to: blue, cause: 'restart' },
      { from: blue, to: green, cause: 'rebuild' },
      { from: green, to: blue, cause: 'rollback' },
    ]);
    // Roll "back" to the newer one by name (a retained generation that served).
    expect(await pipeline.rollback(green)).toMatchObject({ from: blue, to: green, changed: true });
    await waitFor(async () => (await recordsOf(caches, green)) === 115, { what: 'green to catch up' });
    await expect(pipeline.rollback('items-nope')).rejects.toMatchObject({ code: 'NOTHING_TO_ROLL_BACK' });
  }, 30_000);

  it('refuses a rollback whose source cannot resume from that generation (409 CANNOT_RESUME) and changes nothing', async () => {
    await using world = await fileWorld(100, { gcGraceMs: 3_600_000 });
    const { path, caches } = world;
    const events = collector();
    await using pipeline = await start(endpoint(path), caches, events);
    const blue = await pipeline.whenServing();
    // The file is rewritten (its beginning differs): blue's checkpoint no longer describes it.
    await writeFile(path, rows(100, 1001));
    await pipeline.rebuild();
    const green = await servingOtherThan(caches, blue, 'the rebuild to switch');
    const historyBefore = caches.history('items');
    const version = caches.resolveAlias('items')!.version;

    const refused = await pipeline.rollback().then(
      () => null,
      (err: unknown) => err as { code: string; status: number; message: string },
    );
    expect(refused).toMatchObject({ code: 'CANNOT_RESUME', status: 409 });
    expect(refused!.message).toContain('changed');
    expect(caches.resolveAlias('items')).toEqual({ cache: green, version });
    expect(caches.history('items')).toEqual(historyBefore);
    expect((await caches.info(blue))!.state).toBe('retired');
    expect(moves(events.events)).toHaveLength(2);
    // The serving generation still follows its source.
    await appendFile(path, rows(3, 2001));
    await waitFor(async () => (await recordsOf(caches, green)) === 103, { what: 'green to keep following' });
    expect(pipeline.status().error).toBeNull();
  }, 30_000);
});
