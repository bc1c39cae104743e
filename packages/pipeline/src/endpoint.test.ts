import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type { SluiceEvent } from '@sluice/core';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { aliasRecords, memoryCheckpointPort } from '../test/helpers.js';
import { startEndpointPipeline } from './endpoint.js';
import { runTransfer } from './transfer.js';

interface Item {
  id: number;
  value: number;
  category: string;
}
const items = (n: number, from = 0, tag = 'a'): Item[] =>
  Array.from({ length: n }, (_, i) => ({
    id: from + i,
    value: (from + i) % 50,
    category: `${tag}${(from + i) % 3}`,
  }));
const jsonl = (rows: object[]) => rows.map((r) => `${JSON.stringify(r)}\n`).join('');

function collector() {
  const events: SluiceEvent[] = [];
  return { events, publish: async (event: SluiceEvent) => void events.push(event) };
}

const endpoint = (path: string, extra: Record<string, unknown> = {}) => ({
  name: 'items',
  source: { type: 'file' as const, path, format: 'jsonl' as const },
  primaryKey: ['id'],
  fields: { id: 'integer' as const, value: 'number' as const, category: 'string' as const },
  indexes: [['value'], ['category', 'value']],
  ...extra,
});

describe('endpoint pipelines (blue/green)', () => {
  it('builds the first generation, then resumes in place without a new cache', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, jsonl(items(1000)));
    const events = collector();
    {
      await using caches = await openCacheManager(join(dir.path, 'data'));
      const pipeline = await startEndpointPipeline(endpoint(path), { caches, events, connections: {} });
      expect(pipeline.decision.decision).toBe('from-scratch');
      expect(caches.resolveAlias('items')).toBeNull(); // nothing is served before the snapshot is complete
      const built = await pipeline.whenServing();
      expect(caches.resolveAlias('items')?.cache).toBe(built);
      expect(await aliasRecords(caches, 'items')).toEqual(items(1000));
      await pipeline.stop();
    }
    const redirects = events.events.filter((e) => e.type === 'AliasRedirected');
    expect(redirects).toHaveLength(1);
    expect(redirects[0]).toMatchObject({ alias: 'items', from: null });
    expect(events.events.filter((e) => e.type === 'SnapshottingDone')).toHaveLength(1);
    const first = redirects[0]!.type === 'AliasRedirected' ? redirects[0]!.to : '';

    // Restart on an unchanged, then grown, file: case 1 — continue in place.
    await appendFile(path, jsonl(items(200, 1000)));
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(endpoint(path), { caches, events, connections: {} });
    expect(pipeline.decision.decision).toBe('resume');
    expect(pipeline.decision.reason).toMatch(/in place/);
    await waitFor(async () => (await aliasRecords(caches, 'items')).length === 1200, {
      what: 'appended records',
    });
    expect(caches.resolveAlias('items')?.cache).toBe(first);
    expect((await caches.list()).filter((c: { endpoint: string }) => c.endpoint === 'items')).toHaveLength(1);
    expect(events.events.filter((e) => e.type === 'AliasRedirected')).toHaveLength(1);
    await pipeline.stop();
  });

  it('rebuilds into a green cache when the file changed, while blue keeps serving', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, jsonl(items(500)));
    const events = collector();
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const first = await startEndpointPipeline(endpoint(path), { caches, events, connections: {} });
    const blue = await first.whenServing();
    await first.stop();

    await writeFile(path, jsonl(items(20_000, 0, 'b'))); // rewritten: other content
    const second = await startEndpointPipeline(endpoint(path), {
      caches,
      events,
      connections: {},
      commitEveryRecords: 1000,
      fileChunkBytes: 8192,
    });
    expect(second.decision.decision).toBe('from-scratch');
    expect(second.decision.reason).toMatch(/changed/);
    // Blue answers queries during the rebuild with its complete, old content.
    const during = second.status();
    expect(during.servingCache).toBe(blue);
    expect(during.buildingCache).not.toBeNull();
    expect(await aliasRecords(caches, 'items')).toEqual(items(500));
    const green = await second.whenServing();
    expect(green).not.toBe(blue);
    expect(await aliasRecords(caches, 'items')).toEqual(items(20_000, 0, 'b'));
    const redirects = events.events.filter((e) => e.type === 'AliasRedirected');
    expect(redirects).toHaveLength(2);
    expect(redirects[1]).toMatchObject({ alias: 'items', from: blue, to: green });
    expect((await caches.info(blue))?.state).toBe('retired');
    await second.stop();
  });

  it('rebuilds when the schema, key or indexes change', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, jsonl(items(300)));
    const events = collector();
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const first = await startEndpointPipeline(endpoint(path), { caches, events, connections: {} });
    const blue = await first.whenServing();
    await first.stop();
    const second = await startEndpointPipeline(endpoint(path, { indexes: [['category']] }), {
      caches,
      events,
      connections: {},
    });
    expect(second.decision.decision).toBe('from-scratch');
    expect(second.decision.reason).toMatch(/schema/);
    const green = await second.whenServing();
    expect(green).not.toBe(blue);
    expect((await caches.info(green))?.schema.indexes).toEqual([['category']]);
    expect(await aliasRecords(caches, 'items')).toEqual(items(300));
    await second.stop();
  });

  it('rebuilds when the pipeline checkpoint and the cache checkpoint disagree', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, jsonl(items(300)));
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const port = memoryCheckpointPort();
    const events = collector();
    const first = await startEndpointPipeline(endpoint(path), {
      caches,
      events,
      connections: {},
      checkpoint: port,
    });
    await first.whenServing();
    await first.stop();
    const saved = port.value as { epoch: number };
    expect(saved.epoch).toBeGreaterThan(0);
    port.value = { ...saved, epoch: saved.epoch + 5 };
    const second = await startEndpointPipeline(endpoint(path), {
      caches,
      events,
      connections: {},
      checkpoint: port,
    });
    expect(second.decision.decision).toBe('from-scratch');
    expect(second.decision.reason).toMatch(/inconsistent/);
    await second.whenServing();
    expect(events.events.filter((e) => e.type === 'AliasRedirected')).toHaveLength(2);
    await second.stop();
  });

  it('infers field types, filters, projects, follows a growing file and skips values of the wrong type', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(
      path,
      jsonl([
        { id: 1, value: 1.5, category: 'x', secret: 's' },
        { id: 2, value: 2, category: 'hidden', secret: 's' },
        { id: 3, value: 3, category: 'y', secret: 's' },
      ]),
    );
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const events = collector();
    const pipeline = await startEndpointPipeline(
      {
        name: 'items',
        source: { type: 'file', path, format: 'jsonl', follow: true },
        primaryKey: ['id'],
        indexes: [['category']],
        filter: { category: { $ne: 'hidden' } },
        select: ['id', 'value', 'category'],
      },
      { caches, events, connections: {}, commitEveryMs: 50 },
    );
    const cache = await pipeline.whenServing();
    expect((await caches.info(cache))?.schema.fields).toEqual({
      id: 'integer',
      value: 'number',
      category: 'string',
    });
    expect(await aliasRecords(caches, 'items')).toEqual([
      { id: 1, value: 1.5, category: 'x' },
      { id: 3, value: 3, category: 'y' },
    ]);
    // Follow: new lines arrive; an update that leaves the filter removes the record; a wrong type is skipped.
    await appendFile(
      path,
      jsonl([
        { id: 4, value: 4, category: 'z' },
        { id: 1, value: 1.5, category: 'hidden' },
        { id: 5, value: 'not a number', category: 'z' },
      ]),
    );
    await waitFor(async () => (await aliasRecords(caches, 'items')).map((r) => r.id).join() === '3,4', {
      what: 'followed changes',
    });
    await waitFor(() => pipeline.status().progress.badRecords === 1, { what: 'bad record counted' });
    expect(pipeline.status().progress.phase).toBe('streaming');
    await pipeline.stop();
  });
});

describe('endpoint pipelines: rebuild on demand and transfers into an endpoint', () => {
  it('rebuild() builds a new generation and switches once; a transfer upserts into the served cache', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, jsonl(items(100)));
    const events = collector();
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(endpoint(path), { caches, events, connections: {} });
    const blue = await pipeline.whenServing();
    await pipeline.rebuild();
    expect(pipeline.decision).toMatchObject({
      decision: 'from-scratch',
      reason: expect.stringMatching(/rebuild requested/),
    });
    const green = await pipeline.whenServing();
    expect(green).not.toBe(blue);
    expect(events.events.filter((e) => e.type === 'AliasRedirected')).toHaveLength(2);
    expect(await aliasRecords(caches, 'items')).toEqual(items(100));
    const checkpointBefore = pipeline.status().checkpoint;

    // A transfer into the endpoint: keyed upserts into the served generation; bad types are skipped.
    const extra = join(dir.path, 'extra.jsonl');
    await writeFile(extra, jsonl([...items(5, 100, 'z'), { id: 'oops', value: 1, category: 'z' }]));
    const result = await runTransfer(
      {
        id: 'into-endpoint',
        mode: 'idempotent',
        source: { type: 'file', path: extra, format: 'jsonl' },
        destination: { type: 'endpoint', endpoint: 'items' },
        properties: {},
        options: { onBadRecord: 'skip' },
      },
      { checkpoint: memoryCheckpointPort(), connections: {}, caches, signal: new AbortController().signal },
    );
    expect(result).toMatchObject({ recordsWritten: 5, badRecords: 1 });
    expect(await aliasRecords(caches, 'items')).toEqual([...items(100), ...items(5, 100, 'z')]);
    await pipeline.stop();

    // The endpoint's own checkpoint is untouched: the next start continues in place.
    const cache = await caches.openRo('items');
    expect(cache.commitState().checkpoint).toEqual(checkpointBefore);
    await cache.close();
    const again = await startEndpointPipeline(endpoint(path), { caches, events, connections: {} });
    expect(again.decision.decision).toBe('resume');
    await again.stop();
  });
});

describe('endpoint pipelines: a transfer into an endpoint stopped half-way', () => {
  it('resumes in place while the alias still points at the cache it wrote, and starts from scratch once it moved', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, jsonl(items(10)));
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(endpoint(path), {
      caches,
      events: collector(),
      connections: {},
    });
    await pipeline.whenServing();
    const extra = join(dir.path, 'extra.jsonl');
    await writeFile(extra, jsonl(items(2_000, 100, 'z')));
    const request = {
      id: 'into-endpoint-resume',
      mode: 'idempotent' as const,
      source: { type: 'file' as const, path: extra, format: 'jsonl' as const },
      destination: { type: 'endpoint' as const, endpoint: 'items' },
      properties: {},
      options: { onBadRecord: 'skip' as const },
    };
    const shared = { value: null as unknown, epoch: 0 };
    const controller = new AbortController();
    await runTransfer(request, {
      checkpoint: memoryCheckpointPort({ shared, epoch: 1 }),
      connections: {},
      caches,
      signal: controller.signal,
      commitEveryRecords: 100,
      fileChunkBytes: 2_048,
      onProgress: (p) => {
        if (p.epoch >= 2) controller.abort();
      },
    }).catch(() => null);
    const stopped = structuredClone(shared.value);
    expect(stopped).not.toBeNull();

    const resumed = await runTransfer(request, {
      checkpoint: memoryCheckpointPort({ shared: { value: structuredClone(stopped), epoch: 1 }, epoch: 2 }),
      connections: {},
      caches,
      signal: new AbortController().signal,
    });
    expect(resumed.decision).toBe('resume');
    expect(resumed.recordsWritten).toBe(2_000);

    // A rebuild moved the alias: the records before the checkpoint are in the old generation, not in this one.
    const blue = caches.resolveAlias('items')?.cache;
    await pipeline.rebuild();
    expect(await pipeline.whenServing()).not.toBe(blue);
    const moved = await runTransfer(request, {
      checkpoint: memoryCheckpointPort({ shared: { value: structuredClone(stopped), epoch: 1 }, epoch: 3 }),
      connections: {},
      caches,
      signal: new AbortController().signal,
    });
    expect(moved.decision).toBe('from-scratch');
    expect(moved.recordsWritten).toBe(2_000);
    expect((await aliasRecords(caches, 'items')).length).toBe(10 + 2_000);
    await pipeline.stop();
  });
});

describe('endpoint pipelines: a rebuild that switches the alias during a transfer into the endpoint', () => {
  it('defect: the transfer COMPLETED into the retired generation — none of its records served by the new one', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, jsonl(items(10)));
    await using caches = await openCacheManager(join(dir.path, 'data'));
    await using pipeline = await startEndpointPipeline(endpoint(path), {
      caches,
      events: collector(),
      connections: {},
    });
    const blue = await pipeline.whenServing();
    const extra = join(dir.path, 'extra.jsonl');
    await writeFile(extra, jsonl(items(2_000, 100, 'z')));
    // The switch lands between two commits of the transfer, never after its end: the second checkpoint save
    // waits for a real rebuild (steering API) to move the alias to a green generation built from the source.
    const port = memoryCheckpointPort();
    let switched: string | null = null;
    const decisions: string[] = [];
    const result = await runTransfer(
      {
        id: 'into-endpoint-rebuilt',
        mode: 'idempotent',
        source: { type: 'file', path: extra, format: 'jsonl' },
        destination: { type: 'endpoint', endpoint: 'items' },
        properties: {},
        options: { onBadRecord: 'fail' },
      },
      {
        checkpoint: {
          ...port,
          save: async (checkpoint) => {
            await port.save(checkpoint);
            if (switched !== null || (checkpoint as { epoch: number }).epoch !== 2) return;
            await pipeline.rebuild();
            switched = await pipeline.whenServing();
          },
        },
        connections: {},
        caches,
        signal: new AbortController().signal,
        commitEveryRecords: 100,
        fileChunkBytes: 2_048,
        onDecision: (plan) => decisions.push(plan.decision),
      },
    );
    expect(switched).not.toBeNull();
    expect(switched).not.toBe(blue);
    expect(caches.resolveAlias('items')?.cache).toBe(switched);
    expect(result.recordsWritten).toBe(2_000);
    // The run noticed the switch and started over into the new generation (which holds none of its records).
    expect(decisions).toEqual(['from-scratch', 'from-scratch']);
    // Every record of the completed transfer is served (by the generation the alias points at), each once by key.
    const served = await aliasRecords(caches, 'items');
    const servedIds = new Set(served.map((r) => r.id));
    const missing = items(2_000, 100, 'z').flatMap((r) => (servedIds.has(r.id) ? [] : [r.id]));
    expect(missing.length, `first missing: ${missing.slice(0, 5).join(', ')}`).toBe(0);
    expect(served).toEqual([...items(10), ...items(2_000, 100, 'z')]);
  });
});

describe('endpoint pipelines: an interrupted rebuild', () => {
  it('a requested rebuild stopped half-way is continued by the next start, never dropped for the old generation', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, jsonl(items(30_000)));
    const events = collector();
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const options = { caches, events, connections: {}, commitEveryRecords: 500, fileChunkBytes: 8192 };
    const second = await startEndpointPipeline(endpoint(path), options);
    const blue = await second.whenServing({ timeoutMs: 60_000 });
    await second.rebuild();
    const green = second.status().buildingCache;
    expect(green).toBeTruthy();
    expect(green).not.toBe(blue);
    // Progress reports are not commits: wait for green's own committed checkpoint (what a restart resumes from).
    await waitFor(async () => ((await caches.info(green!))?.checkpoint?.epoch ?? 0) >= 3, {
      timeoutMs: 20_000,
      what: 'the green build to commit three epochs',
    });
    await second.stop(); // like a crash mid-rebuild: the alias still points at blue
    expect(caches.resolveAlias('items')?.cache).toBe(blue);
    expect((await caches.info(green!))?.state).toBe('building');
    const committedEpoch = (await caches.info(green!))?.checkpoint?.epoch;
    expect(committedEpoch).toBeGreaterThanOrEqual(3);

    const third = await startEndpointPipeline(endpoint(path), options);
    // Not "continuing in place" in blue, and not a from-scratch restart into green: the rebuild resumes in green
    // from its own committed checkpoint.
    expect(third.decision).toMatchObject({
      decision: 'resume',
      reason: `continuing the rebuild in ${green}: consistent checkpoint at epoch ${committedEpoch}`,
    });
    expect(await third.whenServing({ timeoutMs: 60_000 })).toBe(green);
    expect(caches.resolveAlias('items')?.cache).toBe(green);
    expect(await aliasRecords(caches, 'items')).toEqual(items(30_000));
    await third.stop();
  }, 120_000);
});

describe('endpoint pipelines: failures', () => {
  it('a followed file replaced under a running pipeline fails the run, which is re-planned into a green cache', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'items.jsonl');
    await writeFile(path, jsonl(items(400)));
    const events = collector();
    await using caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startEndpointPipeline(
      endpoint(path, { source: { type: 'file', path, format: 'jsonl', follow: true } }),
      { caches, events, connections: {}, retryMs: 50, commitEveryMs: 50 },
    );
    const blue = await pipeline.whenServing();
    await writeFile(path, jsonl(items(30, 0, 'c'))); // truncated and rewritten
    await waitFor(() => caches.resolveAlias('items')?.cache !== blue, { timeoutMs: 20_000, what: 'rebuild' });
    expect(pipeline.decision).toMatchObject({
      decision: 'from-scratch',
      reason: expect.stringMatching(/shrank/),
    });
    expect(await aliasRecords(caches, 'items')).toEqual(items(30, 0, 'c'));
    expect(events.events.filter((e) => e.type === 'AliasRedirected')).toHaveLength(2);
    await pipeline.stop();
  });
});
