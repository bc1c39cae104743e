import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { type CacheSchema, SluiceError, toProblem } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { open } from 'lmdb';
import { describe, expect, it } from 'vitest';
import { openCacheManager } from './manager.js';
import { schemaHash } from './schema.js';

const schema: CacheSchema = {
  fields: { id: 'integer', value: 'number' },
  primaryKey: ['id'],
  indexes: [['value']],
};
const checkpoint = { dag: 'd', epoch: 3, positions: { src: 42 }, at: '2026-12-02T10:00:00.000Z' };

describe('CacheManager', () => {
  it('creates uniquely named, creation-time-sortable caches and lists them with their state', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const names: string[] = [];
    for (let i = 0; i < 5; i++) {
      const cache = await caches.create({ endpoint: 'items', schema });
      names.push(cache.name);
      await cache.close();
    }
    expect(new Set(names).size).toBe(5);
    expect([...names].sort()).toEqual(names);
    expect(names.every((n) => n.startsWith('items-') && !n.includes('.'))).toBe(true);

    const cache = await caches.openRw(names[0]!);
    cache.apply([
      { op: 'insert', record: { id: 1, value: 1 } },
      { op: 'insert', record: { id: 2, value: 2 } },
    ]);
    await cache.commit(checkpoint);
    const info = await caches.info(names[0]!);
    expect(info).toMatchObject({
      name: names[0],
      endpoint: 'items',
      schemaHash: schemaHash(schema),
      schema,
      state: 'building',
      retiredAt: null,
      recordCount: 2,
      checkpoint,
    });
    expect(info!.sizeBytes).toBeGreaterThan(0);
    expect(info!.committedAt).not.toBeNull();
    expect((await caches.list()).map((c) => c.name)).toEqual(names);
    expect(await caches.info('nope')).toBeNull();
    await expect(caches.openRo('nope')).rejects.toMatchObject({ code: 'CACHE_NOT_FOUND' });
    await expect(caches.openRw('nope')).rejects.toMatchObject({ code: 'CACHE_NOT_FOUND' });
  });

  it('rejects bad endpoints and schemas with validation errors', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const bad: unknown[] = [
      { fields: { id: 'integer' }, primaryKey: [], indexes: [] },
      { fields: { id: 'integer' }, primaryKey: ['nope'], indexes: [] },
      { fields: { id: 'json' }, primaryKey: ['id'], indexes: [] },
      { fields: { id: 'integer' }, primaryKey: ['id'], indexes: [['missing']] },
      { fields: { id: 'integer', v: 'float' }, primaryKey: ['id'], indexes: [] },
      { fields: { id: 'integer' }, primaryKey: ['id', 'id'], indexes: [] },
    ];
    for (const s of bad)
      await expect(caches.create({ endpoint: 'x', schema: s as CacheSchema })).rejects.toMatchObject({
        code: 'VALIDATION_FAILED',
      });
    await expect(caches.create({ endpoint: '../etc', schema })).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
    expect(await caches.list()).toEqual([]);
  });

  it('reports a schema mismatch when opening with another schema', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const created = await caches.create({ endpoint: 'items', schema });
    await created.close();
    await using same = await caches.openRw(created.name, {
      ...schema,
      indexes: [['value']],
      fields: { value: 'number', id: 'integer' },
    });
    expect(same.schema).toEqual(schema);
    for (const other of [
      { ...schema, indexes: [] },
      { ...schema, fields: { id: 'integer', value: 'string' } },
      { ...schema, fields: { ...schema.fields, extra: 'string' } },
      { fields: { id: 'integer', value: 'number' }, primaryKey: ['value'], indexes: [['value']] },
    ] as CacheSchema[]) {
      const err = await caches.openRw(created.name, other).catch((e: unknown) => e);
      expect(SluiceError.hasCode(err, 'CACHE_SCHEMA_MISMATCH')).toBe(true);
      expect((err as SluiceError).details).toMatchObject({
        cache: created.name,
        actualHash: schemaHash(schema),
      });
    }
    // Index order does not change the schema.
    const two = {
      ...schema,
      fields: { ...schema.fields, other: 'string' },
      indexes: [['value'], ['other']],
    } as CacheSchema;
    expect(schemaHash(two)).toBe(schemaHash({ ...two, indexes: [['other'], ['value']] }));
  });

  it('retires an alias: readers no longer see it, its generations are retired, a comeback counts the version on', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const blue = await caches.create({ endpoint: 'gone', schema });
    const held = await caches.create({ endpoint: 'gone', schema });
    const other = await caches.create({ endpoint: 'items', schema });
    await caches.redirect('gone', blue.name);
    await caches.redirect('items', other.name);
    const before = caches.aliasTableVersion();

    expect(await caches.retireAlias('gone')).toEqual({ from: blue.name, version: 2 });
    expect(caches.resolveAlias('gone')).toBeNull();
    expect(caches.listAliases()).toEqual([{ alias: 'items', cache: other.name, version: 1 }]);
    expect(caches.aliasTableVersion()).toBeGreaterThan(before);
    for (const name of [blue.name, held.name]) expect((await caches.info(name))!.state).toBe('retired');
    expect((await caches.info(other.name))!.state).toBe('serving');
    await expect(caches.openRo('gone')).rejects.toMatchObject({ code: 'CACHE_NOT_FOUND' });
    // Nothing live to retire: nothing changes.
    expect(await caches.retireAlias('gone')).toBeNull();
    // Back in the configuration: a new generation, and a version above any event of the retired alias.
    const again = await caches.create({ endpoint: 'gone', schema });
    expect(await caches.redirect('gone', again.name)).toEqual({ from: null, version: 3 });
  });

  it('redirects aliases atomically, returns the previous target, versions every redirect', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const blue = await caches.create({ endpoint: 'items', schema });
    const green = await caches.create({ endpoint: 'items', schema });
    expect(caches.resolveAlias('items')).toBeNull();
    const v0 = caches.aliasTableVersion();

    expect(await caches.redirect('items', blue.name)).toEqual({ from: null, version: 1 });
    expect(caches.resolveAlias('items')).toEqual({ cache: blue.name, version: 1 });
    expect((await caches.info(blue.name))!.state).toBe('serving');
    const v1 = caches.aliasTableVersion();
    expect(v1).toBeGreaterThan(v0);

    expect(await caches.redirect('items', green.name)).toEqual({ from: blue.name, version: 2 });
    expect(caches.resolveAlias('items')).toEqual({ cache: green.name, version: 2 });
    expect(caches.aliasTableVersion()).toBeGreaterThan(v1);
    const blueInfo = await caches.info(blue.name);
    expect(blueInfo!.state).toBe('retired');
    expect(blueInfo!.retiredAt).not.toBeNull();
    expect((await caches.info(green.name))!.state).toBe('serving');
    expect(caches.listAliases()).toEqual([{ alias: 'items', cache: green.name, version: 2 }]);

    // Reading through the alias opens the target.
    green.apply([{ op: 'insert', record: { id: 7, value: 7 } }]);
    await green.commit(null);
    await using ro = await caches.openRo('items');
    expect(ro.name).toBe(green.name);
    expect(ro.get([7])).toEqual({ id: 7, value: 7 });

    await expect(caches.redirect('items', 'missing')).rejects.toMatchObject({ code: 'CACHE_NOT_FOUND' });
    expect(caches.resolveAlias('items')!.cache).toBe(green.name);
  });

  it('keeps each alias switch (from, to, at, cause) in the alias table, newest first, across reopening', async () => {
    await using dir = await tempDir();
    const names: string[] = [];
    {
      await using caches = await openCacheManager(dir.path);
      for (let i = 0; i < 3; i++) {
        const cache = await caches.create({ endpoint: 'items', schema });
        names.push(cache.name);
        await cache.close();
      }
      const other = await caches.create({ endpoint: 'orders', schema });
      await other.close();
      await caches.redirect('items', names[0]!, { cause: 'restart' });
      await caches.redirect('orders', other.name);
      await caches.redirect('items', names[1]!, { cause: 'rebuild' });
      await caches.redirect('items', names[2]!, { cause: 'promote' });
      await caches.redirect('items', names[1]!, { cause: 'rollback' });
    }
    await using reopened = await openCacheManager(dir.path);
    const history = reopened.history('items');
    expect(history.map(({ from, to, cause, version }) => ({ from, to, cause, version }))).toEqual([
      { from: names[2], to: names[1], cause: 'rollback', version: 4 },
      { from: names[1], to: names[2], cause: 'promote', version: 3 },
      { from: names[0], to: names[1], cause: 'rebuild', version: 2 },
      { from: null, to: names[0], cause: 'restart', version: 1 },
    ]);
    expect(history.every((h) => h.alias === 'items' && !Number.isNaN(Date.parse(h.at)))).toBe(true);
    expect(reopened.history('orders').map((h) => h.cause)).toEqual(['rebuild']);
    expect(reopened.history('nope')).toEqual([]);
    // The generation the alias went back to serves again; the one it left is retired.
    const back = (await reopened.info(names[1]!))!;
    expect(back).toMatchObject({ state: 'serving', retiredAt: null, switchedAt: history[0]!.at });
    expect((await reopened.info(names[2]!))!.state).toBe('retired');
    // A reader sees the history too.
    await using reader = await openCacheManager(dir.path, { readOnly: true });
    expect(reader.history('items')).toHaveLength(4);
  });

  it('keeps a bounded history per alias', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const a = await caches.create({ endpoint: 'items', schema });
    const b = await caches.create({ endpoint: 'items', schema });
    for (let i = 0; i < 205; i++) await caches.redirect('items', i % 2 === 0 ? a.name : b.name);
    const history = caches.history('items');
    expect(history).toHaveLength(200);
    expect(history[0]!.version).toBe(205);
    expect(history.at(-1)!.version).toBe(6);
  });

  it('annotates generations (held, snapshot done, decision) and a redirect lifts the hold', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path);
    const blue = await caches.create({ endpoint: 'items', schema });
    const green = await caches.create({ endpoint: 'items', schema });
    const held = { reason: 'manual switch mode', at: new Date().toISOString() };
    await caches.annotate(green.name, { held, snapshotDoneAt: held.at, cause: 'rebuild' });
    await caches.annotate(green.name, {
      decision: { decision: 'from-scratch', reason: 'rebuild requested' },
    });
    expect((await caches.info(green.name))!.notes).toEqual({
      held,
      snapshotDoneAt: held.at,
      cause: 'rebuild',
      decision: { decision: 'from-scratch', reason: 'rebuild requested' },
    });
    expect((await caches.info(blue.name))!.notes).toEqual({});
    await caches.redirect('items', green.name, { cause: 'promote' });
    expect((await caches.info(green.name))!.notes.held).toBeNull();
    await expect(caches.annotate('nope', { held: null })).rejects.toMatchObject({ code: 'CACHE_NOT_FOUND' });
    // retire: abandons a building generation, never the alias target.
    await caches.retire(blue.name);
    await caches.retire(green.name);
    expect((await caches.info(blue.name))!.state).toBe('retired');
    expect((await caches.info(green.name))!.state).toBe('serving');
  });

  it('retires the generations a redirect abandons in its own transaction, never its target or another alias target', async () => {
    await using dir = await tempDir();
    const names: Record<'blue' | 'green' | 'held' | 'orders', string> = {
      blue: '',
      green: '',
      held: '',
      orders: '',
    };
    {
      await using caches = await openCacheManager(dir.path);
      for (const key of ['blue', 'green', 'held'] as const) {
        const cache = await caches.create({ endpoint: 'items', schema });
        names[key] = cache.name;
        await cache.close();
      }
      const orders = await caches.create({ endpoint: 'orders', schema });
      names.orders = orders.name;
      await orders.close();
      await caches.redirect('orders', names.orders);
      await caches.redirect('items', names.blue, { cause: 'restart' });
      await caches.redirect('items', names.green, { cause: 'rebuild' });
      const hold = { reason: 'manual switch mode', at: new Date().toISOString() };
      await caches.annotate(names.held, { held: hold });

      // A move that fails (unknown target) retires nothing: the retires are part of it.
      await expect(
        caches.redirect('items', 'items-missing', { cause: 'rollback', retire: [names.held] }),
      ).rejects.toMatchObject({ code: 'CACHE_NOT_FOUND' });
      expect((await caches.info(names.held))!).toMatchObject({ state: 'building', notes: { held: hold } });

      const version = caches.aliasTableVersion();
      await caches.redirect('items', names.blue, {
        cause: 'rollback',
        retire: [names.held, names.blue, names.orders, 'items-unknown'],
      });
      expect(caches.aliasTableVersion()).toBe(version + 1);
    }
    // What a restart finds: the move and the retire, written together.
    await using reopened = await openCacheManager(dir.path);
    const [rollback] = reopened.history('items');
    expect(rollback).toMatchObject({ from: names.green, to: names.blue, cause: 'rollback' });
    const state = async (name: string) => {
      const info = (await reopened.info(name))!;
      return { state: info.state, retiredAt: info.retiredAt, held: info.notes.held ?? null };
    };
    expect({
      held: await state(names.held),
      blue: await state(names.blue),
      green: (await state(names.green)).state,
      orders: await state(names.orders),
    }).toEqual({
      held: { state: 'retired', retiredAt: rollback!.at, held: null },
      blue: { state: 'serving', retiredAt: null, held: null },
      green: 'retired',
      orders: { state: 'serving', retiredAt: null, held: null },
    });
  });

  it('refuses writes through a read-only manager with CACHE_READ_ONLY (not the auth code FORBIDDEN)', async () => {
    await using dir = await tempDir();
    {
      await using writer = await openCacheManager(dir.path);
      const c = await writer.create({ endpoint: 'items', schema });
      await writer.redirect('items', c.name);
    }
    await using reader = await openCacheManager(dir.path, { readOnly: true });
    const readOnly = { code: 'CACHE_READ_ONLY', status: 403, name: 'CacheReadOnlyError' };
    await expect(reader.create({ endpoint: 'items', schema })).rejects.toMatchObject(readOnly);
    await expect(reader.redirect('items', 'x')).rejects.toMatchObject(readOnly);
    await expect(reader.gc()).rejects.toMatchObject(readOnly);
    const refused = await reader.gc().catch((err: unknown) => err);
    expect(toProblem(refused).body).toMatchObject({ status: 403, code: 'CACHE_READ_ONLY' });
    const ro = await reader.openRo('items');
    expect(ro.commitState().recordCount).toBe(0);
    // The alias still names the writer's generation: nothing was changed through the reader.
    expect(reader.resolveAlias('items')?.cache).toBe(ro.name);
  });

  it('refuses every call on a closed manager with CACHE_CLOSED 503', async () => {
    await using dir = await tempDir();
    const caches = await openCacheManager(dir.path);
    await caches.close();
    const closed = { code: 'CACHE_CLOSED', status: 503, name: 'CacheClosedError' };
    await expect(caches.create({ endpoint: 'items', schema })).rejects.toMatchObject(closed);
    await expect(caches.openRo('items')).rejects.toMatchObject(closed);
    await expect(caches.gc()).rejects.toMatchObject(closed);
    expect(() => caches.resolveAlias('items')).toThrow(expect.objectContaining(closed));
  });
  it('lets a writer join a process that so far only read (read-only handles keep working)', async () => {
    await using dir = await tempDir();
    let name: string;
    {
      await using writer = await openCacheManager(dir.path);
      const cache = await writer.create({ endpoint: 'items', schema });
      cache.apply([{ op: 'insert', record: { id: 1, value: 1 } }]);
      await cache.commit(null);
      await writer.redirect('items', cache.name);
      name = cache.name;
    }
    await using reader = await openCacheManager(dir.path, { readOnly: true });
    const ro = await reader.openRo('items');
    expect(ro.count()).toBe(1);
    const version = reader.aliasTableVersion();

    await using writer = await openCacheManager(dir.path);
    const rw = await writer.openRw(name);
    rw.apply([{ op: 'insert', record: { id: 2, value: 2 } }]);
    await rw.commit(null);
    expect(ro.count()).toBe(2);
    expect(ro.get([2])).toEqual({ id: 2, value: 2 });
    const green = await writer.create({ endpoint: 'items', schema });
    await writer.redirect('items', green.name);
    expect(reader.aliasTableVersion()).toBeGreaterThan(version);
    expect(reader.resolveAlias('items')!.cache).toBe(green.name);
  });
});

describe('generations and gc', () => {
  it('deletes retired generations after the grace period, never the alias target or an open cache', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { gcGraceMs: 60_000 });
    const gen1 = await caches.create({ endpoint: 'items', schema });
    const gen2 = await caches.create({ endpoint: 'items', schema });
    const gen3 = await caches.create({ endpoint: 'items', schema });
    await caches.redirect('items', gen1.name);
    await caches.redirect('items', gen2.name); // gen1 retired
    await caches.redirect('items', gen3.name); // gen2 retired
    for (const c of [gen1, gen2, gen3]) await c.close();
    const reading = await caches.openRo(gen2.name); // a reader still draining gen2

    const now = Date.now();
    expect(await caches.gc(new Date(now + 1_000))).toEqual([]); // within the grace period
    const deleted = await caches.gc(new Date(now + 120_000));
    expect(deleted).toEqual([gen1.name]);
    expect(existsSync(join(dir.path, 'caches', gen1.name))).toBe(false);
    expect(await caches.info(gen1.name)).toBeNull();
    expect(existsSync(join(dir.path, 'caches', gen2.name))).toBe(true);
    expect(reading.count()).toBe(0); // still readable

    await reading.close();
    expect(await caches.gc(new Date(now + 120_000))).toEqual([gen2.name]);
    // The alias target is never collected, however old.
    expect(await caches.gc(new Date(now + 10 * 365 * 86_400_000))).toEqual([]);
    expect(caches.resolveAlias('items')!.cache).toBe(gen3.name);
    expect((await caches.list()).map((c) => c.name)).toEqual([gen3.name]);
  });

  it('collects building generations superseded by a newer one, but not the newest', async () => {
    await using dir = await tempDir();
    await using caches = await openCacheManager(dir.path, { gcGraceMs: 0 });
    const serving = await caches.create({ endpoint: 'items', schema });
    await caches.redirect('items', serving.name);
    const abandoned = await caches.create({ endpoint: 'items', schema }); // crashed rebuild
    await abandoned.close();
    const rebuilding = await caches.create({ endpoint: 'items', schema });
    await rebuilding.close();
    expect(await caches.gc(new Date(Date.now() + 1000))).toEqual([abandoned.name]);
    expect((await caches.list()).map((c) => c.name).sort()).toEqual([serving.name, rebuilding.name].sort());
  });

  it('finishes a deletion interrupted by a crash and removes leftover directories', async () => {
    await using dir = await tempDir();
    let victim: string;
    {
      await using caches = await openCacheManager(dir.path, { gcGraceMs: 0 });
      const a = await caches.create({ endpoint: 'items', schema });
      const b = await caches.create({ endpoint: 'items', schema });
      a.apply([{ op: 'insert', record: { id: 1, value: 1 } }]);
      await a.commit(null);
      await caches.redirect('items', a.name);
      await caches.redirect('items', b.name);
      victim = a.name;
    }
    // Simulate a process that died mid-delete: marked deleting, files half removed.
    const env = open({ path: join(dir.path, 'aliases'), maxDbs: 64 });
    const metas = env.openDB<Record<string, unknown>, string>({ name: 'caches' });
    const meta = metas.get(victim)!;
    env.transactionSync(() => {
      metas.putSync(victim, { ...meta, deleting: true });
    });
    await env.close();
    rmSync(join(dir.path, 'caches', victim, 'data.mdb'));
    // And a directory left without any metadata.
    const leftover = join(dir.path, 'caches', 'items-00000000000000000000000000');
    rmSync(leftover, { recursive: true, force: true });
    (await import('node:fs')).mkdirSync(leftover);

    await using caches = await openCacheManager(dir.path, { gcGraceMs: 3_600_000 });
    expect(await caches.info(victim)).toBeNull(); // a deleting cache is no longer visible
    await expect(caches.openRo(victim)).rejects.toMatchObject({ code: 'CACHE_NOT_FOUND' });
    expect(await caches.gc()).toEqual([victim]);
    expect(readdirSync(join(dir.path, 'caches')).sort()).toEqual([caches.resolveAlias('items')!.cache]);
  });
});
