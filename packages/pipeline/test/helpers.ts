/**
 * Shared helpers of the pipeline's tests (not shipped: `files` holds `src` and `dist` only): checkpoint ports in
 * memory and in a JSON file, fenced like the app-server's store. Child scripts the tests spawn are in `fixtures/`.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import { type CheckpointPort, parseQuery, StaleEpochError } from '@sluice/core';
import { BadRecordCollector } from '../src/bad-records.js';
import { dagHash } from '../src/dag.js';
import type { RunPipelineOptions } from '../src/run.js';

/** A cache as the record helpers read it: pages of records and the cursor of the next one. */
interface PagedCache {
  query(query: ReturnType<typeof parseQuery>): { records: Record<string, unknown>[]; next: string | null };
}

/**
 * Every record of a cache, in primary-key order (pages of 1000).
 *
 * @example
 * ```ts
 * expect(allRecords(cache)).toEqual(rows(100));
 * ```
 */
export function allRecords(cache: PagedCache): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  let after: string | null = null;
  do {
    const page = cache.query(parseQuery({ $limit: 1000, ...(after !== null ? { $after: after } : {}) }));
    out.push(...page.records);
    after = page.next;
  } while (after !== null);
  return out;
}

/**
 * Every record of the generation `alias` points at now, in primary-key order (opened read-only, then closed).
 *
 * @example
 * ```ts
 * expect(await aliasRecords(caches, 'items')).toEqual(items(1000));
 * ```
 */
export async function aliasRecords(
  caches: { openRo(alias: string): Promise<PagedCache & { close(): Promise<void> }> },
  alias: string,
): Promise<Record<string, unknown>[]> {
  const cache = await caches.openRo(alias);
  try {
    return allRecords(cache);
  } finally {
    await cache.close();
  }
}

/** What the file port keeps: the highest epoch that claimed the transfer, and the checkpoint. */
interface Stored {
  epoch: number;
  checkpoint: unknown;
}

/**
 * A durable checkpoint port in a JSON file (write + rename), fenced like the app-server's store: the file keeps
 * the highest epoch that claimed the transfer. `load` is the claim (this epoch becomes the file's epoch unless a
 * higher one is there); `save` and `finishing` refuse with `StaleEpochError` once the file names a higher epoch,
 * so a run at epoch 2 started from the same file fences off the run at epoch 1. One process at a time per step
 * (read, compare, write+rename): good enough for tests whose owners take turns, as the store's row lock is not.
 *
 * @example
 * ```ts
 * const first = fileCheckpointPort('/tmp/cp.json', { epoch: 1 });
 * const second = fileCheckpointPort('/tmp/cp.json', { epoch: 2 }); // takes over on its load()
 * ```
 */
export function fileCheckpointPort(
  path: string,
  options: { epoch?: number; transferId?: string } = {},
): CheckpointPort & { saves: number } {
  const epoch = options.epoch ?? 1;
  const read = async (): Promise<Stored> => {
    try {
      return JSON.parse(await readFile(path, 'utf8')) as Stored;
    } catch {
      return { epoch: 0, checkpoint: null };
    }
  };
  const write = async (stored: Stored) => {
    await writeFile(`${path}.next`, JSON.stringify(stored));
    await rename(`${path}.next`, path);
  };
  const fenced = async (): Promise<Stored> => {
    const stored = await read();
    if (epoch > 0 && stored.epoch > epoch)
      throw new StaleEpochError(options.transferId ?? path, epoch, { details: { current: stored.epoch } });
    return stored;
  };
  const port = {
    saves: 0,
    epoch,
    async load() {
      const stored = await fenced();
      if (epoch > stored.epoch) await write({ ...stored, epoch });
      return stored.checkpoint;
    },
    async save(checkpoint: unknown) {
      const stored = await fenced();
      await write({ epoch: Math.max(epoch, stored.epoch), checkpoint });
      port.saves++;
    },
    async finishing() {
      await fenced();
    },
  };
  return port;
}

/**
 * An in-memory checkpoint port. Ports made with the same `shared` state fence each other like
 * {@link fileCheckpointPort}: the highest epoch that loaded wins.
 *
 * @example
 * ```ts
 * const shared = { value: null, epoch: 0 };
 * const first = memoryCheckpointPort({ shared, epoch: 1 });
 * ```
 */
export function memoryCheckpointPort(
  options: { epoch?: number; shared?: { value: unknown; epoch: number } } = {},
): CheckpointPort & { value: unknown } {
  const shared = options.shared ?? { value: null as unknown, epoch: 0 };
  const epoch = options.epoch ?? 1;
  const fenced = () => {
    if (epoch > 0 && shared.epoch > epoch)
      throw new StaleEpochError('memory', epoch, { details: { current: shared.epoch } });
  };
  return {
    epoch,
    get value() {
      return shared.value;
    },
    set value(v: unknown) {
      shared.value = v;
    },
    load: async () => {
      fenced();
      shared.epoch = Math.max(shared.epoch, epoch);
      return shared.value;
    },
    save: async (checkpoint: unknown) => {
      fenced();
      shared.value = structuredClone(checkpoint);
    },
    finishing: async () => fenced(),
  };
}

/**
 * A file checkpoint port fenced by an owner file as well: `save` and `finishing` fail with `StaleEpochError` once
 * the owner file names another owner (the transfer was taken over). Tests write the owner file to take over.
 *
 * @example
 * ```ts
 * const port = fencedFileCheckpointPort('/tmp/cp.json', '/tmp/owner', 'A', 't1', 1);
 * ```
 */
export function fencedFileCheckpointPort(
  path: string,
  ownerFile: string,
  owner: string,
  transferId: string,
  epoch = 1,
): CheckpointPort & { saves: number } {
  const inner = fileCheckpointPort(path, { epoch, transferId });
  const owned = async () => {
    const current = (await readFile(ownerFile, 'utf8')).trim();
    if (current !== owner) throw new StaleEpochError(transferId, epoch, { details: { owner, current } });
  };
  const port = {
    saves: 0,
    epoch,
    load: () => inner.load(),
    async save(checkpoint: unknown) {
      await owned();
      await inner.save(checkpoint);
      port.saves++;
    },
    async finishing() {
      await owned();
      await inner.finishing();
    },
  };
  return port;
}

/**
 * The options of a first run (no checkpoint) of `branches` into `sink`: a transfer, bad records skipped, never
 * aborted, the DAG hashed from its parts; `options` adds to or overrides them.
 *
 * @example
 * ```ts
 * await runPipeline(firstRun({ name: 'multi', branches, sink, commitEveryRecords: 200 }));
 * ```
 */
export function firstRun(
  options: Pick<RunPipelineOptions, 'name' | 'branches' | 'sink'> & Partial<RunPipelineOptions>,
): RunPipelineOptions {
  return {
    dag: options.dag ?? dagHash(options.branches, options.sink),
    mode: 'transfer',
    plan: { decision: 'from-scratch', reason: 'test', checkpoint: null },
    badRecords: new BadRecordCollector('skip'),
    signal: new AbortController().signal,
    ...options,
  };
}
