/**
 * The staging area of a generation's writer: the changes staged for the next commit that outgrew memory, kept in a
 * `staging` database of the generation's own LMDB environment until that commit applies them (staged-replay.ts)
 * and drops them in its write transaction. So a source transaction of millions of rows costs disk, not memory: the
 * writer holds at most `stagedInMemory` staged changes as JavaScript objects, whatever the transaction's size.
 *
 * Nothing reads it but the writer: readers and change feeds never look at it, and the change log learns of its
 * changes only at the commit. A writer that opens the environment drops whatever a crashed one left there (a
 * transaction never committed: its source replays it from the committed checkpoint).
 *
 * Changes are kept in *sets* (one per spill generation of the writer: a commit takes every set there is, and what
 * is applied while it runs spills into a newer one), each holding
 * - its steps, in apply order: every change (what the change log will show, in order) and every source-transaction
 *   mark (markTransaction), under `S` + set + sequence;
 * - each key's latest change, under `K` + set + data key: what later applies judge conflicts and patches against.
 */
import type { Database, DatabaseOptions } from 'lmdb';
import type { StagedChange } from './batch-write.js';
import type { CacheDbs } from './cache-dbs.js';
import type { SharedEnv } from './lmdb-env.js';
import type { RecordPatch } from './patch.js';

/** One step of a set: a change, or the end of a source transaction at `positions`. */
export type StagingStep = { change: StagedChange } | { positions: Record<string, unknown> };

const LATEST = 0x4b; // 'K'
const STEP = 0x53; // 'S'
const ZERO = Buffer.from([0]);
// Values are bytes of our own layout (below), not MessagePack: a spill writes one per staged change.
const OPTIONS = { keyEncoding: 'binary', encoding: 'binary' } as DatabaseOptions;
/** Entries removed per range query when a set is dropped beside others (bounded memory). */
const REMOVE_CHUNK = 10_000;

/** Flags of a stored step (its first byte). */
const HAS_BYTES = 1;
const HAS_INDEX_KEYS = 2;
const HAS_PATCHES = 4;
const MARK = 0x80;

/**
 * A step as bytes: the flags, then for a change its data key (u16 length), its primary-key values as JSON (u32),
 * its stored JSON text (u32), its index keys (a count, then u16 lengths) and its patches as JSON (u32), each only
 * when present; for a mark, its positions as JSON (u32).
 */
function encodeStep(step: StagingStep): Buffer {
  if (!('change' in step)) {
    const json = Buffer.from(JSON.stringify(step.positions), 'utf8');
    const out = Buffer.allocUnsafe(5 + json.length);
    out[0] = MARK;
    out.writeUInt32BE(json.length, 1);
    json.copy(out, 5);
    return out;
  }
  const { key, pk, bytes, indexKeys, patches } = step.change;
  const pkJson = Buffer.from(JSON.stringify(pk), 'utf8');
  const patchJson = patches ? Buffer.from(JSON.stringify(patches), 'utf8') : null;
  let size = 1 + 2 + key.length + 4 + pkJson.length;
  if (bytes !== null) size += 4 + bytes.length;
  if (indexKeys !== null) {
    size += 1;
    for (const k of indexKeys) size += 2 + k.length;
  }
  if (patchJson !== null) size += 4 + patchJson.length;
  const out = Buffer.allocUnsafe(size);
  out[0] =
    (bytes !== null ? HAS_BYTES : 0) |
    (indexKeys !== null ? HAS_INDEX_KEYS : 0) |
    (patchJson ? HAS_PATCHES : 0);
  let at = 1;
  const put = (part: Uint8Array, lengthBytes: 1 | 2 | 4) => {
    if (lengthBytes === 2) at = out.writeUInt16BE(part.length, at);
    else if (lengthBytes === 4) at = out.writeUInt32BE(part.length, at);
    out.set(part, at);
    at += part.length;
  };
  put(key, 2);
  put(pkJson, 4);
  if (bytes !== null) put(bytes, 4);
  if (indexKeys !== null) {
    out[at++] = indexKeys.length;
    for (const k of indexKeys) put(k, 2);
  }
  if (patchJson !== null) put(patchJson, 4);
  return out;
}

/** The step `encodeStep` wrote (parts copied out: the read buffer is reused by the next read). */
function decodeStep(value: Uint8Array): StagingStep {
  const view = Buffer.from(value.buffer, value.byteOffset, value.length);
  let at = 1;
  const take = (lengthBytes: 2 | 4): Buffer => {
    const length = lengthBytes === 2 ? view.readUInt16BE(at) : view.readUInt32BE(at);
    at += lengthBytes;
    const part = Buffer.from(view.subarray(at, at + length));
    at += length;
    return part;
  };
  const flags = view[0]!;
  if (flags === MARK) return { positions: JSON.parse(take(4).toString('utf8')) };
  const key = take(2);
  const pk = JSON.parse(take(4).toString('utf8')) as unknown[];
  const bytes = flags & HAS_BYTES ? take(4) : null;
  let indexKeys: Buffer[] | null = null;
  if (flags & HAS_INDEX_KEYS) {
    const count = view[at++]!;
    indexKeys = [];
    for (let i = 0; i < count; i++) indexKeys.push(take(2));
  }
  const patches = flags & HAS_PATCHES ? (JSON.parse(take(4).toString('utf8')) as RecordPatch[]) : null;
  return { change: { key, pk, bytes, indexKeys, ...(patches ? { patches } : {}) } };
}

function prefix(kind: number, set: number): Buffer {
  const out = Buffer.allocUnsafe(5);
  out[0] = kind;
  out.writeUInt32BE(set, 1);
  return out;
}

function stepKey(set: number, seq: number): Buffer {
  const out = Buffer.allocUnsafe(9);
  out[0] = STEP;
  out.writeUInt32BE(set, 1);
  out.writeUInt32BE(seq, 5);
  return out;
}

/**
 * The sets of each environment in use by this process's writer handles (two handles may write one generation: an
 * endpoint's pipeline and a transfer into the endpoint). Set ids are unique in the process, so handles never share
 * one, and a handle empties the database at once only when no other set is in use.
 */
const liveSets = new WeakMap<SharedEnv, Set<number>>();
let lastSet = 0;

/**
 * The writer's staging database.
 *
 * @example
 * ```ts
 * const staging = new StagingArea(dbs);
 * staging.discardLeftovers(); // at the writer's start
 * const set = staging.newSet();
 * const next = staging.spill(set, 0, steps);
 * staging.latest(set, dataKey); // the key's change staged in the set, if any
 * ```
 */
export class StagingArea {
  constructor(private readonly dbs: CacheDbs) {
    // Created now (never inside a write transaction), in writable environments only.
    if (!dbs.env.readOnly) void this.db;
  }

  private get db(): Database<Buffer, Buffer> {
    return this.dbs.env.db<Buffer, Buffer>('staging', OPTIONS);
  }

  private get live(): Set<number> {
    let sets = liveSets.get(this.dbs.env);
    if (sets === undefined) {
      sets = new Set();
      liveSets.set(this.dbs.env, sets);
    }
    return sets;
  }

  /**
   * Drops what earlier writers left (a writer's start): sets of a crashed process, never committed, never read.
   * Not while a handle of this process stages into the environment.
   */
  discardLeftovers(): void {
    if (this.live.size > 0) return;
    this.dbs.env.root.transactionSync(() => this.db.clearSync());
  }

  /** A new set, in use until {@link forget}. */
  newSet(): number {
    lastSet = (lastSet % 0xfffffffe) + 1;
    this.live.add(lastSet);
    return lastSet;
  }

  /** The sets no longer exist (their commit landed, or they were discarded). */
  forget(sets: readonly number[]): void {
    for (const set of sets) this.live.delete(set);
  }

  /** Drops `sets` in a write transaction of their own (staged changes no commit will take) and forgets them. */
  discardSets(sets: readonly number[]): void {
    if (sets.length === 0) return;
    this.dbs.env.root.transactionSync(() => this.dropSets(sets));
    this.forget(sets);
  }

  /**
   * Writes `steps` into `set` from sequence `seq` on, each key's latest change pointing at its last step, in one
   * write transaction of its own (not the commit's). Returns the sequence the next spill into the set continues at.
   */
  spill(set: number, seq: number, steps: Iterable<StagingStep>): number {
    const db = this.db;
    let next = seq;
    const lastStep = new Map<string, Buffer>();
    this.dbs.env.root.transactionSync(() => {
      for (const step of steps) {
        const at = stepKey(set, next++);
        if ('change' in step) lastStep.set(step.change.key.toString('latin1'), at);
        db.putSync(at, encodeStep(step));
      }
      for (const [id, at] of lastStep)
        db.putSync(Buffer.concat([prefix(LATEST, set), Buffer.from(id, 'latin1')]), at);
    });
    return next;
  }

  /** The latest change of data key `key` spilled into `set`, or undefined. */
  latest(set: number, key: Buffer): StagedChange | undefined {
    const at = this.db.getBinary(Buffer.concat([prefix(LATEST, set), key]));
    if (at === undefined) return undefined;
    const step = decodeStep(this.db.getBinary(at)!);
    return 'change' in step ? step.change : undefined;
  }

  /**
   * Up to `limit` keys `set` holds a change of, in key order, after data key `after` (exclusive; null: from the
   * first): each one's data key and primary-key values.
   */
  latestPage(set: number, after: Buffer | null, limit: number): Array<{ key: Buffer; pk: unknown[] }> {
    const start = after === null ? prefix(LATEST, set) : Buffer.concat([prefix(LATEST, set), after, ZERO]);
    const out: Array<{ key: Buffer; pk: unknown[] }> = [];
    const pointers = [...this.db.getRange({ start, end: prefix(LATEST, set + 1), limit })].map(({ value }) =>
      Buffer.from(value),
    );
    for (const at of pointers) {
      const step = decodeStep(this.db.getBinary(at)!);
      if ('change' in step) out.push({ key: step.change.key, pk: step.change.pk });
    }
    return out;
  }

  /**
   * True when the database holds entries of `sets` and of no other set, as the current transaction reads it. Read
   * rather than judged from this thread's live sets: a commit thread (commit-thread.ts) drops sets while the
   * writer's thread may have spilled into a newer one.
   */
  private holdsOnly(sets: readonly number[]): boolean {
    const db = this.db;
    for (const kind of [LATEST, STEP]) {
      const end = Buffer.from([kind + 1]);
      let start = prefix(kind, 0);
      for (;;) {
        let set: number | null = null;
        for (const key of db.getKeys({ start, end, limit: 1 })) set = (key as Buffer).readUInt32BE(1);
        if (set === null) break;
        if (!sets.includes(set)) return false;
        if (set === 0xffffffff) break;
        start = prefix(kind, set + 1);
      }
    }
    return true;
  }

  /** The steps of `set` in order, read lazily (inside the commit's write transaction). */
  *steps(set: number): Generator<StagingStep> {
    for (const { value } of this.db.getRange({ start: prefix(STEP, set), end: prefix(STEP, set + 1) }))
      yield decodeStep(value);
  }

  /**
   * Drops `sets`. Inside the commit's write transaction, so they go exactly when their changes land ({@link forget}
   * them once it has). When the database holds nothing else, it is emptied at once.
   */
  dropSets(sets: readonly number[]): void {
    const db = this.db;
    if (this.holdsOnly(sets)) {
      db.clearSync();
      return;
    }
    for (const set of sets)
      for (const kind of [STEP, LATEST])
        for (;;) {
          const range = { start: prefix(kind, set), end: prefix(kind, set + 1), limit: REMOVE_CHUNK };
          const keys = [...db.getKeys(range)];
          if (keys.length === 0) break;
          for (const key of keys) db.removeSync(key);
        }
  }
}
