/**
 * Where an index scan's record bytes go: LMDB hands each covering entry's value to a decoder while it is still in
 * LMDB's shared read buffer, and the decoder copies it straight into a reusable arena — no Buffer (and no
 * backing store) per record, which was the largest cost of a page once index entries held the records. The
 * page is copied out of the arena once, at the end (`rowsJson`, into the response body's one buffer).
 */
import type { DatabaseOptions } from 'lmdb';

/**
 * A reusable byte arena for one read's scanned records. A read that needs more room moves on to a bigger
 * buffer (rows already read keep theirs). Every copied value is preceded by one free byte, so values copied one
 * after another are one span with a separator slot between each two (`rowsJson` copies a run of consecutive
 * entries at once, with commas in those slots).
 */
export class Arena {
  /** The buffer the last copied value went to. */
  buffer = Buffer.allocUnsafe(64 * 1024);
  /** Size of the last copied value. */
  lastLength = 0;
  private at = 0;

  /** Starts a read (drops an arena grown past 8 MiB). */
  reset(): void {
    if (this.buffer.length > 8 * 1024 * 1024) this.buffer = Buffer.allocUnsafe(64 * 1024);
    this.at = 0;
  }

  /** Copies `size` bytes of `source` in, after one free separator byte; returns their offset in {@link buffer}. */
  copyIn(source: Uint8Array, size: number): number {
    if (this.at + size + 1 > this.buffer.length) {
      this.buffer = Buffer.allocUnsafe(Math.max(this.buffer.length * 2, size * 2 + 2));
      this.at = 0;
    }
    const offset = this.at + 1;
    // A view of exactly `size` bytes: LMDB's read buffer is larger than its (overridden) length says.
    this.buffer.set(new Uint8Array(source.buffer, source.byteOffset, size), offset);
    this.at = offset + size;
    this.lastLength = size;
    return offset;
  }
}

let active: Arena | null = null;

/**
 * Runs `fn` with `arena` receiving the values scanned through {@link ARENA_SCAN_OPTIONS} handles (reads are
 * synchronous, so one arena is active at a time; nesting restores the outer one).
 */
export function withArena<T>(arena: Arena, fn: () => T): T {
  const outer = active;
  active = arena;
  try {
    return fn();
  } finally {
    active = outer;
  }
}

/** The decoder of scan handles: a value is copied into the active arena and read as its offset there. */
const arenaDecoder = {
  encode(): never {
    throw new Error('scan handles are read-only; write through the database handle');
  },
  decode(bytes: Uint8Array, size?: number): number {
    if (active === null) throw new Error('an index scan handle was read outside a cache read');
    return active.copyIn(bytes, size ?? bytes.length);
  },
};

/** Where the last key a scan handle read sits: LMDB's shared key buffer, valid until the scan's next step. */
let keySource: Uint8Array | null = null;
let keyStart = 0;
let keyEnd = 0;

/**
 * The key encoder of scan handles. Keys are written as given (binary), and a read key is not copied: lmdb-js
 * sliced every scanned key into a new buffer (a tenth of a range query's scan), while a query needs the key only
 * to bound a reverse scan or to order a run of truncated keys. The scan reads as the key's length; the bytes are
 * copied by {@link lastScannedKey} when needed. Why and what was measured: docs/performance.md § Index scans without
 * key copies.
 */
const lazyKeyEncoder = {
  writeKey(key: Uint8Array, target: Uint8Array, start: number): number {
    target.set(key, start);
    return start + key.length;
  },
  readKey(source: Uint8Array, start: number, end: number): number {
    keySource = source;
    keyStart = start;
    keyEnd = end;
    return end - start;
  },
};

/** A copy of the key a scan handle read last (call it before the scan's next step). */
export function lastScannedKey(): Buffer {
  if (keySource === null) throw new Error('no key was scanned');
  return Buffer.from(keySource.subarray(keyStart, keyEnd));
}

/**
 * Options of a scan handle: binary keys read as their length ({@link lastScannedKey} copies one), each value
 * decoded to its offset in the active arena, whose `buffer` then holds it.
 */
export const ARENA_SCAN_OPTIONS = {
  keyEncoder: lazyKeyEncoder,
  encoder: arenaDecoder,
} as unknown as DatabaseOptions;
