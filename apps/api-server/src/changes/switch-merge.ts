/**
 * What a change feed sends across a blue/green switch: the upserts and deletes that turn the old generation's
 * records into the new one's, for one subscriber's filter — a merge of both generations by primary key, or, when
 * the primary key changed, every old record deleted and every new one upserted. Moved out of subscriber.ts.
 */
import type { PinnedGeneration, ReadableCache } from '@sluice/core';
import { FeedEvent, sseFrame } from './frames.js';

/** One side of a switch: a pinned snapshot of a generation's records, and the cache (for its schema). */
export interface SwitchSide {
  pin: PinnedGeneration;
  cache: ReadableCache;
}

export interface MergeOutput {
  /** The token (`id`) every frame of the merge carries: the position of the `switch` event. */
  id: string;
  /**
   * The subscriber's filter, compiled for each side's fields (a schema change may canonicalize its operands
   * differently): only records it keeps count (one leaving it is deleted, one entering it upserted).
   */
  keepOld: (record: Record<string, unknown>) => boolean;
  keepNew: (record: Record<string, unknown>) => boolean;
  /** Sends one frame (and may wait for the client to read). */
  emit: (frame: string) => Promise<void>;
}

/**
 * Emits the upserts/deletes that turn `from`'s records into `to`'s, for `out.keepOld` / `out.keepNew`.
 *
 * @example
 * ```ts
 * await mergeFrames({ pin: pinBlue, cache: blue }, { pin: pinGreen, cache: green }, { id, keepOld, keepNew, emit });
 * ```
 */
export async function mergeFrames(from: SwitchSide, to: SwitchSide, out: MergeOutput): Promise<void> {
  const { pin: pinFrom, cache: fromCache } = from;
  const { pin: pinTo, cache: toCache } = to;
  const { id, keepOld, keepNew, emit } = out;
  const fromPk = fromCache.schema.primaryKey;
  const toPk = toCache.schema.primaryKey;
  const sameKeys =
    fromPk.length === toPk.length &&
    fromPk.every((f, i) => f === toPk[i] && fromCache.schema.fields[f] === toCache.schema.fields[f]);
  const upsert = (record: Record<string, unknown>) =>
    sseFrame(FeedEvent.upsert, { key: toPk.map((f) => record[f]), record }, id);
  const remove = (record: Record<string, unknown>) =>
    sseFrame(FeedEvent.delete, { key: fromPk.map((f) => record[f]) }, id);
  if (!sameKeys) {
    // Another primary key: keys do not correspond, so every old record goes and every new one comes.
    for (const { record } of pinFrom.records()) if (keepOld(record)) await emit(remove(record));
    for (const { record } of pinTo.records()) if (keepNew(record)) await emit(upsert(record));
    return;
  }
  const olds = pinFrom.records()[Symbol.iterator]();
  const news = pinTo.records()[Symbol.iterator]();
  let a = olds.next();
  let b = news.next();
  while (!a.done || !b.done) {
    const order = a.done ? 1 : b.done ? -1 : Buffer.compare(a.value.dataKey, b.value.dataKey);
    if (order < 0) {
      if (keepOld(a.value.record)) await emit(remove(a.value.record));
      a = olds.next();
    } else if (order > 0) {
      if (keepNew(b.value.record)) await emit(upsert(b.value.record));
      b = news.next();
    } else {
      const had = keepOld(a.value.record);
      const has = keepNew(b.value.record);
      if (has && (!had || JSON.stringify(a.value.record) !== JSON.stringify(b.value.record)))
        await emit(upsert(b.value.record));
      else if (!has && had) await emit(remove(a.value.record));
      a = olds.next();
      b = news.next();
    }
  }
}
