import { DiskFullError, SluiceError } from '@sluice/core';

const DISK_FULL = /ENOSPC|No space left|EFBIG|File too large|MDB_MAP_FULL|MDB_TXN_FULL|EDQUOT|quota/i;

/** True when a native LMDB/fs error means the disk (or the file-size limit) is full. */
export function isDiskFull(err: unknown): boolean {
  if (SluiceError.isInstance(err)) return false;
  const e = err as { message?: unknown; code?: unknown } | null;
  return DISK_FULL.test(String(e?.message ?? '')) || DISK_FULL.test(String(e?.code ?? ''));
}

/** Rethrows a write failure as `CACHE_DISK_FULL` when the disk is full; other errors pass through. */
export function translateWriteError(err: unknown, what: string): unknown {
  if (isDiskFull(err))
    return new DiskFullError(`${what}: the disk is full; nothing was written`, { cause: err });
  return err;
}
