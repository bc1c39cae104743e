/**
 * What a change feed sends across a blue/green switch: the upserts and deletes that turn the old generation's
 * records into the new one's, for one subscriber's filter — a merge of both generations by primary key, or, when
 * the primary key changed, every old record deleted and every new one upserted. Moved out of subscriber.ts.
 */
import type { ChangeBefore, PinnedGeneration, ReadableCache } from '@sluice/core';
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
  const upsert = (record: Record<string, unknown>) =>
    sseFrame(FeedEvent.upsert, { key: toPk.map((f) => record[f]), record }, id);
  const remove = (record: Record<string, unknown>) =>
    sseFrame(FeedEvent.delete, { key: fromPk.map((f) => record[f]) }, id);
  if (!sameKeys(fromCache, toCache)) {
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

/** Whether two generations have the same primary key (fields and types): their records merge key by key. */
export function sameKeys(fromCache: ReadableCache, toCache: ReadableCache): boolean {
  const fromPk = fromCache.schema.primaryKey;
  const toPk = toCache.schema.primaryKey;
  return (
    fromPk.length === toPk.length &&
    fromPk.every((f, i) => f === toPk[i] && fromCache.schema.fields[f] === toCache.schema.fields[f])
  );
}

/** Where a merge was cut off: the sequence of each side its events showed (the tokens of the merge name both). */
export interface MergeCut {
  fromSeq: number;
  toSeq: number;
}

/** A key changed in a log since a sequence: its values, and what it held at that sequence (undefined: not said). */
interface Touched {
  key: unknown[];
  atCut: ChangeBefore | undefined;
}

/** Entries read per chunk from a pinned log. */
const LOG_CHUNK = 500;

/** The keys a pinned log changed after `after`, each with what it held at `after` (its first change's `before`). */
function touchedSince(pin: PinnedGeneration, after: number): Map<string, Touched> {
  const touched = new Map<string, Touched>();
  for (let seq = after; seq < pin.head.last; ) {
    const entries = pin.read(seq, LOG_CHUNK);
    if (entries.length === 0) break;
    for (const entry of entries) {
      if (entry.op === 'commit') continue;
      const id = JSON.stringify(entry.key);
      if (!touched.has(id)) touched.set(id, { key: entry.key, atCut: entry.before });
    }
    seq = entries[entries.length - 1]!.seq;
  }
  return touched;
}

/**
 * The merge of a subscriber cut off in the middle of one, resumed later: what turns its records into `to`'s now.
 * Cut off, it holds each key as `from` had it at `cut.fromSeq` or as `to` had it at `cut.toSeq` — whichever the
 * merge had reached — and both may have moved on since. So every key whose two values may differ from `to`'s now is
 * sent: a key `from` and `to` hold differently now, or one either log changed since its cut. (Running the first
 * merge again instead would leave a record `to` had at the cut and has deleted since.) Both logs must still hold
 * the entries after the cut, and both sides the same primary key: the caller checks.
 *
 * @example
 * ```ts
 * await resumedMergeFrames({ pin: pinBlue, cache: blue }, { pin: pinGreen, cache: green }, { fromSeq, toSeq }, out);
 * ```
 */
export async function resumedMergeFrames(
  from: SwitchSide,
  to: SwitchSide,
  cut: MergeCut,
  out: MergeOutput,
): Promise<void> {
  const { id, keepOld, keepNew, emit } = out;
  const pk = to.cache.schema.primaryKey;
  const fromTouched = touchedSince(from.pin, cut.fromSeq);
  const toTouched = touchedSince(to.pin, cut.toSeq);
  // Whether the subscriber may hold the key, in its view, from either side: then a key `to` lacks is deleted.
  // A log that does not say what a key held (undefined) gets the delete, in case.
  const mayHold = (fromAtCut: ChangeBefore | undefined, toAtCut: ChangeBefore | undefined) =>
    fromAtCut === undefined ||
    toAtCut === undefined ||
    (fromAtCut !== null && keepOld(fromAtCut)) ||
    (toAtCut !== null && keepNew(toAtCut));
  const send = async (
    key: unknown[],
    now: Record<string, unknown> | null,
    fromAtCut: ChangeBefore | undefined,
    toAtCut: ChangeBefore | undefined,
  ) => {
    if (now !== null && keepNew(now)) await emit(sseFrame(FeedEvent.upsert, { key, record: now }, id));
    else if (mayHold(fromAtCut, toAtCut)) await emit(sseFrame(FeedEvent.delete, { key }, id));
  };
  const seen = new Set<string>();
  const olds = from.pin.records()[Symbol.iterator]();
  const news = to.pin.records()[Symbol.iterator]();
  let a = olds.next();
  let b = news.next();
  while (!a.done || !b.done) {
    const order = a.done ? 1 : b.done ? -1 : Buffer.compare(a.value.dataKey, b.value.dataKey);
    const old = order <= 0 && !a.done ? a.value.record : null;
    const now = order >= 0 && !b.done ? b.value.record : null;
    const record = (now ?? old)!;
    const key = pk.map((f) => record[f]);
    const keyId = JSON.stringify(key);
    seen.add(keyId);
    const fromChange = fromTouched.get(keyId);
    const toChange = toTouched.get(keyId);
    const differs = old === null || now === null || JSON.stringify(old) !== JSON.stringify(now);
    if (differs || fromChange || toChange)
      await send(key, now, fromChange ? fromChange.atCut : old, toChange ? toChange.atCut : now);
    if (order <= 0) a = olds.next();
    if (order >= 0) b = news.next();
  }
  // Keys neither side holds now that a log changed since the cut: the subscriber may hold one of their values.
  for (const [keyId, change] of [...fromTouched, ...toTouched]) {
    if (seen.has(keyId)) continue;
    seen.add(keyId);
    // Not changed in a log: absent from that side at its cut (it holds the key neither then nor now).
    const heldAtCut = (touched: Map<string, Touched>) =>
      touched.has(keyId) ? touched.get(keyId)!.atCut : null;
    await send(change.key, null, heldAtCut(fromTouched), heldAtCut(toTouched));
  }
}
