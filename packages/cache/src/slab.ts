/**
 * Response bytes cut from shared slabs instead of a buffer each. A small `Buffer` of its own (`Buffer.from`,
 * lmdb-js's `getBinary`, `Buffer.allocUnsafe` past Node's 8 KiB pool) is a new ArrayBuffer with a backing store
 * the garbage collector tracks; at tens of thousands of answers a second those made a fifth of a lookup's CPU
 * garbage collection (docs/performance.md § Answers cut from slabs).
 */

/** Size of the slabs answers are cut from. */
const SLAB_BYTES = 256 * 1024;
let slab: Buffer | null = null;
let slabUsed = 0;

/**
 * A buffer of `size` bytes (contents unset), cut from a shared slab. A slab lives as long as any buffer cut from it,
 * like Node's own pool; a buffer larger than an eighth of a slab gets its own.
 *
 * @example
 * ```ts
 * const out = slabBuffer(bytes.length);
 * bytes.copy(out);
 * ```
 */
export function slabBuffer(size: number): Buffer {
  if (size > SLAB_BYTES >>> 3) return Buffer.allocUnsafeSlow(size);
  if (slab === null || slabUsed + size > SLAB_BYTES) {
    slab = Buffer.allocUnsafeSlow(SLAB_BYTES);
    slabUsed = 0;
  }
  const out = slab.subarray(slabUsed, slabUsed + size);
  // Buffers start 8-byte aligned, as in Node's pool.
  slabUsed += (size + 7) & ~7;
  return out;
}

/**
 * A copy of `bytes` cut from a slab — of lmdb-js's shared read buffer, say, which the next read overwrites. That
 * buffer's `length` is the value's size, an own property set on a larger buffer: only `subarray` (which reads the
 * real bounds) cuts the value out of it; `Buffer#copy` and `Uint8Array#set` would take the whole buffer.
 */
export function slabCopy(bytes: Buffer): Buffer {
  const size = bytes.length;
  const out = slabBuffer(size);
  out.set(bytes.subarray(0, size));
  return out;
}
