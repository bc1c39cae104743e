/**
 * Where WAL records can end, so that a position on a page boundary also stands for the first byte past that page's
 * header.
 *
 * Why: a client reads its write's position with `pg_current_wal_insert_lsn()` (the write location,
 * `pg_current_wal_lsn()`, can still be before a commit made with `synchronous_commit = off`). When the last record
 * ended exactly at a page boundary, the insert location is past the next page's header — boundary + 24 bytes, + 40
 * at a segment's start — while the walsender reports the boundary itself (the end of the last record) until another
 * record is written, which on a quiet database may take longer than any freshness wait. No record ends inside a page
 * header, so everything up to the boundary is everything up to the end of the header, and a position that has
 * passed the boundary may say so.
 */
import type pg from 'pg';
import { formatLsn, parseLsn } from './lsn.js';

/** The WAL page layout of one PostgreSQL server (its compile-time block size and its initdb segment size). */
export interface WalLayout {
  /** `wal_block_size`, bytes (8192 unless PostgreSQL was built otherwise). */
  blockSize: number;
  /** `wal_segment_size`, bytes (16 MiB unless initdb was told otherwise). */
  segmentSize: number;
}

/** PostgreSQL's `SizeOfXLogShortPHD`: the header of every WAL page but a segment's first (64-bit builds). */
const SHORT_PAGE_HEADER = 24n;
/** PostgreSQL's `SizeOfXLogLongPHD`: the header of a segment's first page. */
const LONG_PAGE_HEADER = 40n;

/** Reads the WAL layout of the server `client` is connected to. */
export async function walLayout(client: pg.ClientBase): Promise<WalLayout> {
  const result = await client.query<{ block: string; segment: string }>(
    `SELECT current_setting('wal_block_size') AS block,
            (SELECT setting FROM pg_settings WHERE name = 'wal_segment_size') AS segment`,
  );
  const row = result.rows[0]!;
  return { blockSize: Number(row.block), segmentSize: Number(row.segment) };
}

/**
 * `lsn`, or — when it is a page boundary — the first byte past that page's header: the same point of the WAL for
 * anyone asking whether every record ending at or before a position has been read.
 *
 * @example
 * ```ts
 * pastPageHeader('0/19A4000', { blockSize: 8192, segmentSize: 16 * 1024 * 1024 }); // '0/19A4018'
 * pastPageHeader('0/2000000', { blockSize: 8192, segmentSize: 16 * 1024 * 1024 }); // '0/2000028' (a segment's start)
 * ```
 */
export function pastPageHeader(lsn: string, layout: WalLayout): string {
  const value = parseLsn(lsn);
  if (value === 0n || value % BigInt(layout.blockSize) !== 0n) return formatLsn(value);
  const header = value % BigInt(layout.segmentSize) === 0n ? LONG_PAGE_HEADER : SHORT_PAGE_HEADER;
  return formatLsn(value + header);
}
