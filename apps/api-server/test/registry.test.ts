/**
 * The switching core on its own: real caches written by a writer process, read by a read-only cache manager in
 * this process, events through the in-process backplane.
 */

import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createSingleNodeBackplane, type SingleNodeBackplane } from '@sluice/backplane';
import { type CacheManager, openCacheManager } from '@sluice/cache';
import { aliasRedirected } from '@sluice/core';
import { expectSluiceError, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { EndpointRegistry, type RegistryOptions } from '../src/registry.js';
import { writeGeneration } from './helpers.js';

/**
 * A registry over the caches of `root`, opened read-only as an api-server opens them, with events through the
 * in-process backplane and the periodic reconcile far away (only an event or `reconcile()` moves it). Disposing
 * it closes the registry, the backplane and the cache manager, in that order.
 */
async function startRegistry(
  root: string,
  options: Pick<RegistryOptions, 'onSwitch' | 'onSwitchFailure'> = {},
): Promise<
  { manager: CacheManager; events: SingleNodeBackplane; registry: EndpointRegistry } & AsyncDisposable
> {
  const manager = await openCacheManager(root, { readOnly: true });
  const events = createSingleNodeBackplane();
  try {
    const registry = await EndpointRegistry.start({
      caches: manager,
      host: 'local',
      events,
      reconcileMs: 600_000,
      ...options,
    });
    return {
      manager,
      events,
      registry,
      async [Symbol.asyncDispose]() {
        await registry[Symbol.asyncDispose]();
        await events[Symbol.asyncDispose]();
        await manager[Symbol.asyncDispose]();
      },
    };
  } catch (err) {
    await events[Symbol.asyncDispose]();
    await manager[Symbol.asyncDispose]();
    throw err;
  }
}

describe('EndpointRegistry', () => {
  it('swaps on an event, keeps the old generation open for leases in flight, ignores stale events', async () => {
    await using dir = await tempDir('sluice-registry-');
    const blue = await writeGeneration(dir.path, 1, 50);
    const switches: string[] = [];
    const failures: string[] = [];
    // The reconcile is far away: only the event can explain a switch within this test.
    await using started = await startRegistry(dir.path, {
      onSwitch: ({ to, reason }) => switches.push(`${reason}:${to}`),
      onSwitchFailure: ({ to }) => failures.push(to),
    });
    const { manager, events, registry } = started;
    expect(registry.current('items')?.name).toBe(blue);
    expect(switches).toEqual([`initial:${blue}`]);

    const lease = registry.acquire('items');
    const green = await writeGeneration(dir.path, 2, 50);
    const entry = manager.resolveAlias('items')!;
    expect(entry.cache).toBe(green);
    // Events are connected, so the table watch is idle: nothing moves until the event arrives.
    expect(registry.current('items')?.name).toBe(blue);
    await events.publish(
      aliasRedirected({
        host: 'local',
        alias: 'items',
        from: blue,
        to: green,
        checkpoint: null,
        version: entry.version,
      }),
    );
    await waitFor(() => registry.current('items')?.name === green, { what: 'the event-driven switch' });
    expect(switches).toEqual([`initial:${blue}`, `event:${green}`]);

    // The request that took its lease before the switch still reads blue, wholly.
    expect(lease.cache.get([7])?.gen).toBe(1);
    expect(lease.cache.count({})).toBe(50);
    expect(registry.openGenerations()).toBe(2);
    lease.release();
    lease.release(); // idempotent
    await waitFor(() => registry.openGenerations() === 1, { what: 'blue to close after its last lease' });
    expect(registry.acquire('items').cache.get([7])?.gen).toBe(2);

    // A late duplicate of an older redirect changes nothing; nor does an event for a cache that cannot be opened.
    await events.publish(
      aliasRedirected({ host: 'local', alias: 'items', from: null, to: blue, checkpoint: null, version: 1 }),
    );
    await events.publish(
      aliasRedirected({
        host: 'local',
        alias: 'items',
        from: green,
        to: 'items-does-not-exist',
        checkpoint: null,
        version: entry.version + 5,
      }),
    );
    await waitFor(() => failures.length > 0, { what: 'the failed open to be reported' });
    expect(registry.current('items')?.name).toBe(green);
    expect(failures).toEqual(['items-does-not-exist']);
    expect(() => registry.acquire('nope')).toThrow(expect.objectContaining({ code: 'UNKNOWN_ENDPOINT' }));
  }, 60_000);

  it('defect: an alias whose generation cannot be opened answered 404 UNKNOWN_ENDPOINT; it is 503 ENDPOINT_NOT_READY until a generation opens', async () => {
    // An upgrade that changes the stored format left the old generation unreadable while the app-server rebuilt
    // it, and every request for the endpoint said it did not exist. Here the aliased generation's files are gone.
    await using dir = await tempDir('sluice-registry-');
    const blue = await writeGeneration(dir.path, 1, 20);
    await rm(join(dir.path, 'caches', blue), { recursive: true, force: true });
    await using started = await startRegistry(dir.path);
    const { registry } = started;
    const refused = expectSluiceError(() => registry.acquire('items'), 'ENDPOINT_NOT_READY');
    expect(refused.message).toContain(`its cache ${blue} cannot be opened`);
    expect(refused.details).toEqual({ endpoint: 'items' });
    expectSluiceError(() => registry.acquire('nothing-here'), 'UNKNOWN_ENDPOINT');
    // The rebuilt generation opens: served again, and the failure is forgotten.
    const green = await writeGeneration(dir.path, 2, 20);
    await registry.reconcile();
    expect(registry.current('items')?.name).toBe(green);
    const lease = registry.acquire('items');
    expect(lease.cache.get([7])?.gen).toBe(2);
    lease.release();
  }, 60_000);

  it('reconciles a moved alias without any event on reconcile()', async () => {
    await using dir = await tempDir('sluice-registry-');
    const blue = await writeGeneration(dir.path, 1, 50);
    await using started = await startRegistry(dir.path);
    const { registry } = started;
    expect(registry.current('items')?.name).toBe(blue);
    const green = await writeGeneration(dir.path, 2, 50);
    await registry.reconcile();
    expect(registry.current('items')?.name).toBe(green);
    await registry.close();
    expect(registry.ready).toBe(false);
    expect(registry.openGenerations()).toBe(0);
  }, 60_000);
});
