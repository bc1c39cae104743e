import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { type FileHandle, open, stat } from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';
import { type FieldType, SourceError } from '@sluice/core';
import { z } from 'zod';
import type { BadRecordReport } from '../bad-records.js';
import { repeatedKey } from '../json-keys.js';
import { inexactNumber } from '../json-numbers.js';
import type { RecordOp, Row } from '../ops.js';
import { ownField, setOwnField } from '../own.js';
import { convertCsvCell } from '../schema.js';
import type { PipelineSource, ReadOptions, ResumeCheck, SourceItem } from '../types.js';
import { parseCsvRecord } from './csv.js';
import { type Line, readLines } from './lines.js';

const HEAD_BYTES = 4096;

/** Where a file source stands: byte offset, line count, and a fingerprint of the content read so far. */
export const FilePositionSchema = z.object({
  offset: z.number().int().nonnegative(),
  line: z.number().int().nonnegative(),
  read: z.number().int().nonnegative(),
  /** SHA-256 of the first `headLength` bytes. */
  head: z.string(),
  headLength: z.number().int().nonnegative(),
  /** SHA-256 of the `tailLength` bytes just before `offset` (the last line read). */
  tail: z.string(),
  tailLength: z.number().int().nonnegative(),
  header: z.array(z.string()).nullable(),
});
export type FilePosition = z.output<typeof FilePositionSchema>;

export interface FileSourceOptions {
  handle: string;
  path: string;
  format: 'jsonl' | 'csv';
  /** Keep reading as the file grows (endpoints only; a transfer stops at the end). */
  follow?: boolean;
  /** Field types CSV cells are converted to (by column name); other columns stay strings. */
  fields?: Record<string, FieldType>;
  /** Lines longer than this are bad records. Default 8 MiB. */
  maxLineBytes?: number;
  /** How often a following source looks for growth. Default 200 ms. */
  pollMs?: number;
  /** Read size; smaller reads mean smaller batches. Default 256 KiB. */
  chunkBytes?: number;
}

const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');

async function hashRange(file: string | FileHandle, start: number, length: number): Promise<string> {
  const handle = typeof file === 'string' ? await open(file, 'r') : file;
  try {
    const buffer = Buffer.alloc(length);
    const { bytesRead } = length === 0 ? { bytesRead: 0 } : await handle.read(buffer, 0, length, start);
    return sha256(buffer.subarray(0, bytesRead));
  } finally {
    if (handle !== file) await handle.close();
  }
}

/**
 * What no longer matches between the file and a position read from it, or null: its first `headLength` bytes and
 * the last line read (the `tailLength` bytes before `offset`). The same check decides a resume and, for a followed
 * file, whether the file at the path is still the one being read (a rotated or rewritten file is another file).
 */
async function fingerprintChange(file: string | FileHandle, position: FilePosition): Promise<string | null> {
  if ((await hashRange(file, 0, position.headLength)) !== position.head) return 'its beginning differs';
  if ((await hashRange(file, position.offset - position.tailLength, position.tailLength)) !== position.tail)
    return 'the last line read differs';
  return null;
}

/** What tells one state of a followed file from another without reading it. */
type FileStamp = { dev: number; ino: number; size: number; mtimeMs: number };
const sameStamp = (a: FileStamp | null, b: FileStamp) =>
  a !== null && a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeMs === b.mtimeMs;

/**
 * Opens `path` for one read of the source: non-blocking, so a FIFO (or another special file) put where a file
 * was expected is refused instead of hanging a libuv thread until a writer comes; then checked to be a file.
 */
async function openRegularFile(path: string): Promise<FileHandle> {
  let file: FileHandle | null = null;
  try {
    file = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
    if (!(await file.stat()).isFile()) throw new Error('not a regular file');
    return file;
  } catch (err) {
    await file?.close().catch(() => {});
    throw cannotRead(path, err);
  }
}

/** `errno` codes of a file that is there but that the app-server's user may not read: a setting to fix. */
const DENIED_ERRNO = new Set(['EACCES', 'EPERM']);

/**
 * Why `path` cannot be read, as a `SOURCE_FAILED` about the source's `path` setting (`details.setting`): a file not
 * written yet carries `details.notReady` (core's `SourceNotReady`), so that an endpoint waits for it; another
 * reason (a denied permission, a directory or a FIFO at the path) is a configuration to fix.
 */
function cannotRead(path: string, err: unknown): SourceError {
  const errno = String((err as { code?: unknown }).code);
  // Not there yet: another job may still write it (ENOENT also when a directory on its path is missing). ENOTDIR —
  // a file where the path needs a directory — is a path to fix.
  if (errno === 'ENOENT')
    return new SourceError(`Cannot read file ${path}: it does not exist yet (${errno})`, {
      cause: err,
      details: { path, setting: 'path', notReady: { setting: 'path', reason: 'does not exist yet' } },
    });
  const reason = DENIED_ERRNO.has(errno)
    ? `the app-server's user may not read it (${errno}): fix its permissions or the path`
    : (err as Error).message;
  return new SourceError(`Cannot read file ${path}: ${reason}`, {
    cause: err,
    details: { path, setting: 'path' },
  });
}

/** Why a line (or a CSV record) whose bytes are not UTF-8 is bad. */
const NOT_UTF8 =
  'the line is not valid UTF-8 (bytes no character is encoded as: a file in another encoding, such as Latin-1, must be converted to UTF-8 first)';

/** Why a CSV record open from `first` to the end of the file (`last`) is bad. */
function unclosedQuote(first: Line, last: Line): string {
  const lines =
    first.number === last.number ? `line ${first.number}` : `lines ${first.number}–${last.number}`;
  return `unclosed quote: the file ends inside the record of ${lines} (a quoted cell opened there never closes)`;
}

/**
 * Why `header` cannot name a CSV file's columns, or null: a name given twice. A record is an object, so the later
 * cell under that name replaced the earlier one in every row — data dropped silently. The file cannot be read
 * faithfully: the read fails, naming the columns (1-based, as a spreadsheet shows them).
 */
function repeatedColumn(header: string[]): string | null {
  const first = new Map<string, number>();
  for (const [i, name] of header.entries()) {
    const earlier = first.get(name);
    if (earlier !== undefined)
      return `the CSV header names column "${name}" twice (columns ${earlier + 1} and ${i + 1})`;
    first.set(name, i);
  }
  return null;
}

/**
 * A JSON Lines or CSV file. Resumes by byte offset when the file's fingerprint (its first 4 KiB and the
 * last line read) is unchanged; a file that only grew resumes, a rewritten one starts from scratch.
 *
 * @example
 * ```ts
 * const source = createFileSource({ handle: 'items.source', path: '/data/items.jsonl', format: 'jsonl' });
 * ```
 */
export function createFileSource(options: FileSourceOptions): PipelineSource {
  const maxLineBytes = options.maxLineBytes ?? 8 * 1024 * 1024;
  const pollMs = options.pollMs ?? 200;
  const fields = options.fields;
  let lastSize: number | null = null;
  let lastOffset = 0;

  async function canResume(raw: unknown): Promise<ResumeCheck> {
    const parsed = FilePositionSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, reason: 'the checkpointed file position is malformed' };
    const position = parsed.data;
    let size: number;
    try {
      const info = await stat(options.path);
      if (!info.isFile()) return { ok: false, reason: `${options.path} is no longer a regular file` };
      size = info.size;
    } catch {
      return { ok: false, reason: `file ${options.path} no longer exists` };
    }
    if (size < position.offset)
      return {
        ok: false,
        reason: `file ${options.path} shrank below the checkpointed offset ${position.offset}`,
      };
    const change = await fingerprintChange(options.path, position);
    if (change !== null)
      return { ok: false, reason: `file ${options.path} changed (${change} from the checkpoint)` };
    return { ok: true };
  }

  async function* read(from: unknown | null, readOptions: ReadOptions): AsyncGenerator<SourceItem> {
    const follow =
      options.follow === true && (readOptions.mode === 'endpoint' || readOptions.follow === true);
    if (follow) yield* readFollowing(from, readOptions);
    else yield* readOnce(from, readOptions);
  }

  /** A new position at the start of the file open as `file`, fingerprinted by its first bytes. */
  async function startOf(file: FileHandle, size: number): Promise<FilePosition> {
    const headLength = Math.min(HEAD_BYTES, size);
    return {
      offset: 0,
      line: 0,
      read: 0,
      head: await hashRange(file, 0, headLength),
      headLength,
      tail: sha256(''),
      tailLength: 0,
      header: null,
    };
  }

  const truncatedBelow = (offset: number) =>
    new SourceError(`File ${options.path} was truncated below offset ${offset}`, {
      details: { path: options.path, offset },
    });

  /**
   * A one-time read (a transfer's) goes through one open handle: its fingerprint, its lines and the hash of each
   * batch's last line (a 1-record file used to cost three opens and two stats), up to the size it had when opened.
   */
  async function* readOnce(from: unknown | null, readOptions: ReadOptions): AsyncGenerator<SourceItem> {
    const file = await openRegularFile(options.path);
    try {
      const size = (await file.stat()).size;
      let position = from === null ? await startOf(file, size) : FilePositionSchema.parse(from);
      // The lag counts from where this read starts: a resumed read that finds nothing new must not report the
      // bytes an earlier run already committed as still to read.
      lastOffset = position.offset;
      if (size < position.offset) throw truncatedBelow(position.offset);
      lastSize = size;
      if (size > position.offset) {
        for await (const item of readFrom(file, position, size, readOptions, true)) {
          position = item.position as FilePosition;
          lastOffset = position.offset;
          yield item;
        }
      }
      yield { kind: 'snapshot-done', position };
    } finally {
      await file.close();
    }
  }

  /**
   * A followed file is looked at every `pollMs`, by path: it may be rotated (renamed away and replaced, or copied
   * and truncated in place, then written again) while followed. Whenever it looks different (another inode, size or
   * modification time) it is opened and fingerprinted as a resume is — its first bytes and the last line read — and
   * only the file the position was read from is read on, through that handle. Another file at the path (its content
   * may well be longer than the offset) fails the read, as a truncated one does, instead of being read from the old
   * offset: mid-line, past records never read. The endpoint then cannot resume either and builds a new generation
   * from the file now there.
   */
  async function* readFollowing(from: unknown | null, readOptions: ReadOptions): AsyncGenerator<SourceItem> {
    let position = from === null ? null : FilePositionSchema.parse(from);
    if (position !== null) lastOffset = position.offset;
    let seen: FileStamp | null = null;
    let snapshotDone = false;
    for (;;) {
      const stamp = await stat(options.path).catch((err: Error) => err);
      if (stamp instanceof Error)
        throw seen === null
          ? cannotRead(options.path, stamp)
          : new SourceError(`File ${options.path} disappeared`, { cause: stamp });
      if (!sameStamp(seen, stamp)) {
        const file = await openRegularFile(options.path);
        try {
          const opened = await file.stat();
          if (position === null) {
            position = await startOf(file, opened.size);
            lastOffset = 0;
          }
          if (opened.size < position.offset) throw truncatedBelow(position.offset);
          const change = await fingerprintChange(file, position);
          if (change !== null)
            throw new SourceError(
              `File ${options.path} changed while it was followed (${change} from what was read up to byte ${position.offset}): it was rotated, replaced or rewritten, so it is not read on from that offset`,
              { details: { path: options.path, offset: position.offset, change } },
            );
          lastSize = opened.size;
          if (opened.size > position.offset) {
            for await (const item of readFrom(file, position, opened.size, readOptions, false)) {
              position = item.position as FilePosition;
              lastOffset = position.offset;
              yield item;
            }
          }
          seen = opened;
        } finally {
          await file.close();
        }
      }
      if (!snapshotDone) {
        snapshotDone = true;
        yield { kind: 'snapshot-done', position: position! };
      }
      try {
        await delay(pollMs, undefined, { signal: readOptions.signal });
      } catch {
        return;
      }
    }
  }

  async function* readFrom(
    file: FileHandle,
    start: FilePosition,
    /** The file's size when this read began. */
    size: number,
    readOptions: ReadOptions,
    /**
     * The end of the file is the end of the input (a one-time read): an unterminated last line is a line, and
     * a CSV record still open there is bad. A followed file may still be written, so both wait for more.
     */
    final: boolean,
  ): AsyncGenerator<SourceItem> {
    let position = { ...start };
    let header = position.header;
    /** A CSV record spanning lines: its text so far, its first line, and its last line read (for its line end). */
    let continued = null as { text: string; first: Line; last: Line; invalidUtf8: boolean } | null;
    /** The line just before `continued` began, or null when it began where this read did. */
    let beforeContinued: Line | null = null;
    let ops: RecordOp[] = [];
    let bad: BadRecordReport[] = [];
    let read = 0;
    let lastLine: Line | null = null;

    const at = (line: Line) => ({ source: options.handle, line: line.number, offset: line.start });
    const reject = (line: Line, reason: string) => {
      read++;
      bad.push({ ...at(line), reason });
    };

    /** Closes the current batch at the last complete record; its position is where the next read starts. */
    const flush = async (): Promise<SourceItem | null> => {
      if (lastLine === null) return null;
      // A CSV record still open across lines is re-read from its first line on resume.
      const boundary = continued ? continued.first : null;
      const end = boundary ? boundary.start : lastLine.end;
      if (end === position.offset && ops.length === 0 && bad.length === 0) return null;
      const endLine = boundary ? boundary.number - 1 : lastLine.number;
      const next: FilePosition = {
        ...position,
        offset: end,
        line: endLine,
        read: position.read + read,
        header,
      };
      // The fingerprint's tail is the line that ends at the new offset: before an open record, the line before it
      // (not the last line taken, inside the open record) — else a resume, or the next look at a followed file,
      // would compare the wrong bytes and take the file for changed.
      const tailLine = boundary ? beforeContinued : lastLine;
      if (tailLine !== null && tailLine.end === end) {
        next.tailLength = tailLine.end - tailLine.start;
        next.tail = await hashRange(file, tailLine.start, next.tailLength);
      }
      position = next;
      const item: SourceItem = { kind: 'records', ops, bad, read, position };
      ops = [];
      bad = [];
      read = 0;
      return item;
    };

    for await (const lines of readLines(options.path, {
      start: position.offset,
      firstLineNumber: position.line + 1,
      maxLineBytes,
      includePartialLast: final,
      // The end of a one-time read is the end of the input, so the file must still reach the size it had: one cut
      // short under the read ends early, and its last records are missing, not done.
      ...(final ? { expectedEnd: size } : {}),
      signal: readOptions.signal,
      file,
      ...(options.chunkBytes ? { highWaterMark: options.chunkBytes } : {}),
    })) {
      for (const line of lines) {
        if (ops.length + bad.length >= readOptions.batchSize && continued === null) {
          const item = await flush();
          if (item) yield item;
        }
        const previous = lastLine;
        lastLine = line;
        if (line.oversized) {
          continued = null;
          reject(line, `line longer than ${maxLineBytes} bytes`);
          continue;
        }
        if (options.format === 'jsonl') {
          if (line.text.trim() === '') continue;
          if (line.invalidUtf8) {
            reject(line, NOT_UTF8);
            continue;
          }
          let value: unknown;
          try {
            value = JSON.parse(line.text);
          } catch (err) {
            reject(line, `malformed JSON: ${(err as Error).message}`);
            continue;
          }
          if (typeof value !== 'object' || value === null || Array.isArray(value)) {
            reject(line, 'a JSON Lines record must be an object');
            continue;
          }
          const inexact = inexactNumber(line.text);
          if (inexact !== null) {
            reject(line, inexact);
            continue;
          }
          const twice = repeatedKey(line.text, value);
          if (twice !== null) {
            reject(line, `an object names key ${JSON.stringify(twice)} twice (only one value could be kept)`);
            continue;
          }
          read++;
          ops.push({ op: 'upsert', record: value as Row, at: at(line) });
        } else {
          // A line break inside a quoted cell is data: CRLF stays CRLF.
          const text: string = continued
            ? `${continued.text}${continued.last.crlf ? '\r\n' : '\n'}${line.text}`
            : line.text;
          const first: Line = continued?.first ?? line;
          const invalidUtf8 = (continued?.invalidUtf8 ?? false) || line.invalidUtf8;
          if (text.length > maxLineBytes) {
            continued = null;
            reject(first, `CSV record longer than ${maxLineBytes} bytes`);
            continue;
          }
          const cells = parseCsvRecord(text);
          if (cells === null) {
            if (continued === null) beforeContinued = previous;
            continued = { text, first, last: line, invalidUtf8 };
            continue;
          }
          continued = null;
          if (invalidUtf8) {
            if (header === null) throw new SourceError(`File ${options.path}: the CSV header: ${NOT_UTF8}`);
            reject(first, NOT_UTF8);
            continue;
          }
          if (header === null) {
            header = cells.map((c) => c.trim());
            const twice = repeatedColumn(header);
            if (twice !== null) throw new SourceError(`File ${options.path}: ${twice}`);
            continue;
          }
          if (cells.length === 1 && cells[0] === '') continue;
          if (cells.length !== header.length) {
            reject(first, `expected ${header.length} columns, got ${cells.length}`);
            continue;
          }
          const record: Row = {};
          let problem: string | null = null;
          for (let i = 0; i < header.length; i++) {
            const name = header[i]!;
            try {
              setOwnField(record, name, convertCsvCell(cells[i]!, fields && ownField(fields, name)));
            } catch (message) {
              problem = `column "${name}": ${String(message)}`;
              break;
            }
          }
          if (problem !== null) {
            reject(first, problem);
            continue;
          }
          read++;
          ops.push({ op: 'upsert', record, at: at(first) });
        }
      }
      const item = await flush();
      if (item) yield item;
    }
    // A quoted cell may span lines, so a quote that never closes runs to the end of the file. Once that end is
    // final the record that opened the quote is bad, reported with the lines it took so none vanish unnoticed.
    if (final && continued !== null && lastLine !== null && !readOptions.signal.aborted) {
      reject(continued.first, unclosedQuote(continued.first, lastLine));
      continued = null;
      const item = await flush();
      if (item) yield item;
    }
  }

  return {
    handle: options.handle,
    description: {
      type: 'file',
      path: options.path,
      format: options.format,
      follow: options.follow === true,
      fields: fields ?? null,
    },
    canResume,
    read,
    lag: () => (lastSize === null ? null : Math.max(0, lastSize - lastOffset)),
    close: async () => {},
  };
}
