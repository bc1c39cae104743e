import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { CacheDamagedError } from '@sluice/core';

/** LMDB's meta-page magic (`MDB_MAGIC`), stored little-endian in the meta header of the file's first two pages. */
const MDB_MAGIC = 0xbeefc0de;
/** How far into a meta page its magic is looked for (the page header before it differs between LMDB builds). */
const MAGIC_SEARCH_BYTES = 64;
/**
 * Where the meta fields this check reads sit, from the magic (`MDB_meta`: magic, version, address, map size, then the
 * free and main databases' records — the free one's first field holds the page size —, the last page, the txn id).
 */
const PAGE_SIZE_AT = 24;
const LAST_PAGE_AT = 120;
const TXN_ID_AT = 128;
/** An LMDB file holds at least its two meta pages; no page size is smaller than 4 KiB. */
const MIN_PAGE_BYTES = 4096;

/** What one meta page says: the page size, the last page the file must hold, and the commit it belongs to. */
interface MetaPage {
  pageSize: number;
  lastPage: bigint;
  txnId: bigint;
}

/**
 * Refuses (`CACHE_DAMAGED`) a `data.mdb` that is not a whole LMDB file — overwritten, truncated (a copy or restore cut
 * short) — before LMDB maps it: lmdb-js reads such a file as pages and kills the whole process instead of failing the
 * open (SIGSEGV for other bytes, SIGBUS for pages past the end of a truncated file). A missing or empty file passes
 * (LMDB creates the environment there). LMDB only ever appends pages before it commits the meta page naming them,
 * so a sound file is never shorter than its newest meta page says.
 *
 * @example
 * ```ts
 * assertLmdbFile('/data/caches/items-01/data.mdb'); // throws CacheDamagedError for a file of other bytes
 * ```
 */
export function assertLmdbFile(file: string): void {
  let size: number;
  try {
    size = statSync(file).size;
  } catch {
    return; // absent: LMDB creates it (read-write) or reports it (read-only)
  }
  if (size === 0) return;
  const damaged = (why: string) =>
    new CacheDamagedError(`${file} is not an LMDB file (${why}); it was truncated or overwritten`, {
      path: file,
    });
  if (size < 2 * MIN_PAGE_BYTES) throw damaged(`${size} bytes, shorter than its two meta pages`);
  const fd = openSync(file, 'r');
  let metas: Array<MetaPage | null>;
  try {
    const first = readMeta(fd, 0);
    metas = [first, first === null || first.pageSize * 2 > size ? null : readMeta(fd, first.pageSize)];
  } finally {
    closeSync(fd);
  }
  const [first, second] = metas;
  if (!first || !second) throw damaged('no LMDB meta page at its start');
  const newest = second.txnId > first.txnId ? second : first;
  const needed = (newest.lastPage + 1n) * BigInt(newest.pageSize);
  if (BigInt(size) < needed) throw damaged(`${size} bytes, its last commit needs ${needed}`);
}

/** The meta page at `offset` of the open file `fd`, or null when there is none (no magic near its start). */
function readMeta(fd: number, offset: number): MetaPage | null {
  const page = Buffer.alloc(MAGIC_SEARCH_BYTES + TXN_ID_AT + 8);
  if (readSync(fd, page, 0, page.length, offset) < page.length) return null;
  for (let at = 0; at + 4 <= MAGIC_SEARCH_BYTES; at += 4) {
    if (page.readUInt32LE(at) !== MDB_MAGIC) continue;
    const pageSize = page.readUInt32LE(at + PAGE_SIZE_AT);
    // A power of two of at least 4 KiB, or this is no meta page.
    if (pageSize < MIN_PAGE_BYTES || (pageSize & (pageSize - 1)) !== 0) return null;
    return {
      pageSize,
      lastPage: page.readBigUInt64LE(at + LAST_PAGE_AT),
      txnId: page.readBigUInt64LE(at + TXN_ID_AT),
    };
  }
  return null;
}
