/**
 * The rows a query scan yields (a record's stored JSON text where the scan left it, decoded only on demand) and the
 * page body written from them: the records' stored texts copied into one JSON array, never re-encoded.
 */
import { slabBuffer } from './slab.js';

/**
 * One scanned entry: its scanned key, its data key and its stored JSON text. Its fields are decoded only when
 * something needs them (a residual filter, a sort, a cursor): see {@link fieldsOf}.
 */
export interface Row {
  /** The scanned key (empty where nothing reads it: see `scanEntries`). */
  key: Buffer;
  /** The data key, when the scan read it (primary scans); see `dataKeyOf` (query-exec.ts). */
  dataKey: Buffer | null;
  /** The buffer holding the record's JSON text at `offset`, `length` bytes (a copy LMDB made for the scan). */
  bytes: Buffer;
  offset: number;
  length: number;
  record: Record<string, unknown> | null;
}

/** The fields of a row (decoded from its JSON text once). */
export function fieldsOf(row: Row): Record<string, unknown> {
  if (row.record === null)
    row.record = JSON.parse(row.bytes.toString('utf8', row.offset, row.offset + row.length));
  return row.record!;
}

const OPEN = 0x5b; // [
const COMMA = 0x2c;
const CLOSE = 0x5d; // ]

/** What a page's JSON array is written between (UTF-8 text; see `JsonPageFrame` in core). */
export interface PageFrame {
  head: string;
  tail: string;
}

/**
 * The JSON array of the rows' stored texts, `[a,b,…]` (between the frame's head and tail, when given), in one
 * buffer. Rows scanned one after another into the arena sit one separator byte apart, so a run of them is one
 * copy, with commas in those bytes.
 */
export function rowsJson(rows: readonly Row[], frame?: PageFrame): Buffer {
  const head = frame?.head ?? '';
  const tail = frame?.tail ?? '';
  const headBytes = head.length === 0 ? 0 : Buffer.byteLength(head);
  const tailBytes = tail.length === 0 ? 0 : Buffer.byteLength(tail);
  let size = headBytes + tailBytes + 2 + Math.max(0, rows.length - 1);
  for (let i = 0; i < rows.length; i++) size += rows[i]!.length;
  // Cut from a slab: \`Buffer.allocUnsafe\` cut a page of a few KiB from Node's 8 KiB pool, which every other page used
  // up (4.8 % of a range query's CPU over HTTP; docs/performance.md § Queries below fastify).
  const out = slabBuffer(size);
  let at = headBytes === 0 ? 0 : out.write(head, 0);
  out[at++] = OPEN;
  let i = 0;
  while (i < rows.length) {
    const first = rows[i]!;
    const bytes = first.bytes;
    let end = first.offset + first.length;
    let j = i + 1;
    while (j < rows.length) {
      const row = rows[j]!;
      if (row.bytes !== bytes || row.offset !== end + 1) break;
      bytes[end] = COMMA;
      end = row.offset + row.length;
      j += 1;
    }
    if (i > 0) out[at++] = COMMA;
    at += bytes.copy(out, at, first.offset, end);
    i = j;
  }
  out[at++] = CLOSE;
  if (tailBytes > 0) out.write(tail, at);
  return out;
}
