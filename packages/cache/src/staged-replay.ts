/**
 * Applies a commit's staged changes that were spilled to the staging area (staging.ts), inside the commit's write
 * transaction: each change in the order it was applied, against the data as the changes before it left it. So each
 * change's `before` (what the change log keeps) is exactly the record it replaced, a patch fills its unchanged fields
 * from exactly that record, and nothing but the current change is held in memory — unlike `writeChanges`
 * (batch-write.ts), which sorts a batch in memory to write each database in key order.
 *
 * A change that changes nothing (an upsert of the stored bytes, a delete of an absent key) is not written and not
 * logged.
 */
import type { Database } from 'lmdb';
import { putSucceeded, type ResolvePatches } from './batch-write.js';
import { type CacheDbs, indexKey } from './cache-dbs.js';
import type { LoggedStep } from './change-log.js';
import { decodeRecord } from './record-json.js';
import type { StagingStep } from './staging.js';

const APPEND = { append: true };
const NO_FLAGS = {};

/** The last key of `db` in the current (write) transaction, or null when it is empty. */
function lastKey(db: Database<Buffer, Buffer>): Buffer | null {
  for (const key of db.getKeys({ reverse: true, limit: 1 })) return Buffer.from(key as Buffer);
  return null;
}

/** What a replay did, filled as its steps are consumed. */
export interface ReplayOutcome {
  /** Record-count delta. */
  delta: number;
}

/**
 * Replays `steps` into the data and index databases and yields what the change log shows of them: each change that
 * changed something (with its `before`), and each source-transaction mark. Lazy: nothing is applied until the
 * steps are read (the change log's append reads them as it writes). Call inside a write transaction.
 */
export function* replaySteps(
  dbs: CacheDbs,
  primaryKey: readonly string[],
  steps: Iterable<StagingStep>,
  resolve: ResolvePatches,
  outcome: ReplayOutcome,
): Generator<LoggedStep> {
  const { data, indexes } = dbs;
  // Keys past the last one are appended (MDB_APPEND: no search, full pages): a big insert in key order.
  let last = lastKey(data);
  for (const step of steps) {
    if (!('change' in step)) {
      yield step;
      continue;
    }
    const change = step.change;
    const old = data.getBinary(change.key);
    const oldRecord = old === undefined ? undefined : decodeRecord(old);
    if (change.patches) resolve(change, oldRecord);
    if (change.bytes === null) {
      if (old === undefined || oldRecord === undefined) continue;
      data.removeSync(change.key);
      for (const index of indexes) index.db.removeSync(indexKey(index, oldRecord, primaryKey));
      outcome.delta -= 1;
      yield { pk: change.pk, bytes: null, before: old };
      continue;
    }
    if (old !== undefined && change.bytes.equals(old)) continue;
    const append = last === null || Buffer.compare(change.key, last) > 0;
    if (!putSucceeded(data, change.key, change.bytes, append ? APPEND : NO_FLAGS) && append)
      throw new Error(`append of key ${change.key.toString('hex')} refused (not past the last key)`);
    if (append) last = change.key;
    const keys = change.indexKeys!;
    indexes.forEach((index, i) => {
      const key = keys[i]!;
      if (oldRecord !== undefined) {
        const before = indexKey(index, oldRecord, primaryKey);
        if (!before.equals(key)) index.db.removeSync(before);
      }
      // Covering entries hold the record's bytes: a same-key entry is overwritten with the new ones.
      index.db.putSync(key, change.bytes!);
    });
    if (old === undefined) outcome.delta += 1;
    yield { pk: change.pk, bytes: change.bytes, before: old ?? null };
  }
}

/** Reads `steps` to the end for what reading them does: a lazy replay ({@link replaySteps}) applies each step it yields. */
export function readToEnd(steps: Iterable<unknown>): void {
  for (const _step of steps) {
    // Reading the step applied it: nothing else is wanted of it.
  }
}
