import { DiskFullError, SluiceError } from '@sluice/core';
import { RECORD_FORMAT, RECORD_FORMAT_NAME } from './record-json.js';

const DISK_FULL_MESSAGE = /ENOSPC|No space left|EFBIG|File too large|MDB_MAP_FULL|EDQUOT|quota/i;
/**
 * errno values of a write that ran out of room: EIO (LMDB reports a short write — what a full disk or a file-size
 * limit produces — as EIO), EFBIG, ENOSPC, EDQUOT; and MDB_MAP_FULL.
 */
const DISK_FULL_CODES = new Set<unknown>([5, 27, 28, 122, -30792, 'EIO', 'EFBIG', 'ENOSPC', 'EDQUOT']);

/** True when a native LMDB/fs write error means there is no room left (disk, quota or file-size limit). */
export function isDiskFull(err: unknown): boolean {
  if (SluiceError.isInstance(err) || typeof err !== 'object' || err === null) return false;
  const e = err as { message?: unknown; code?: unknown };
  return DISK_FULL_CODES.has(e.code) || DISK_FULL_MESSAGE.test(String(e.message ?? ''));
}

/** Rethrows a write failure as `CACHE_DISK_FULL` when there is no room left; other errors pass through. */
export function translateWriteError(err: unknown, what: string): unknown {
  if (isDiskFull(err))
    return new DiskFullError(
      `${what}: no room left to write (disk full, quota or file-size limit); nothing was written`,
      { cause: err },
    );
  return err;
}

/**
 * A cache generation written in an older record form (before records were stored as JSON text). It is refused
 * with `CACHE_SCHEMA_MISMATCH` — its stored layout does not match what this version reads — so the endpoint
 * pipeline rebuilds it into a new generation through the blue/green path (as for a changed schema) and readers
 * never serve its bytes.
 */
export class RecordFormatError extends SluiceError {
  constructor(cache: string, stored: { recordFormat?: number }) {
    const found =
      stored.recordFormat === undefined
        ? 'MessagePack records (format 1)'
        : `record format ${stored.recordFormat}`;
    super({
      code: 'CACHE_SCHEMA_MISMATCH',
      message: `Cache "${cache}" stores ${found}; this version stores and serves format ${RECORD_FORMAT} (${RECORD_FORMAT_NAME}). Rebuild the endpoint (the app-server does so into a new generation on start)`,
      details: { cache, recordFormat: stored.recordFormat ?? 1, expectedRecordFormat: RECORD_FORMAT },
    });
  }
}
