import { isUtf8 } from 'node:buffer';
import { createReadStream, read } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { SourceError } from '@sluice/core';

/** One line of a file: its text (without the newline), 1-based number, and byte offsets. */
export interface Line {
  text: string;
  number: number;
  /** Byte offset of the line's first byte. */
  start: number;
  /** Byte offset just after the line's newline (where the next line starts). */
  end: number;
  /** The line was longer than the limit; `text` is empty. */
  oversized: boolean;
  /**
   * The line's bytes are not UTF-8 (a Latin-1 or Windows-1252 export, a binary file): `text` has U+FFFD in their
   * place, so it is no faithful copy of the line and must not be read as a record.
   */
  invalidUtf8: boolean;
  /** The line ended with CRLF (its CR is not in `text`); a CSV cell spanning lines keeps it. */
  crlf: boolean;
}

/**
 * Reads complete lines from `path` starting at byte `start` (which must be a line start), as arrays of
 * lines per chunk read, so the consumer's pace drives the reads (backpressure). An unterminated last line
 * is returned only when `includePartialLast` is set (a growing file may still be writing it).
 */
export async function* readLines(
  path: string,
  options: {
    start: number;
    firstLineNumber: number;
    maxLineBytes: number;
    includePartialLast: boolean;
    signal: AbortSignal;
    highWaterMark?: number;
    /** Read through this open handle (left open) instead of opening `path`. */
    file?: FileHandle;
    /**
     * The file's size when the read began, for a read that must reach it (a one-time read of the whole file). The
     * file ending before it was cut short (truncated in place) while being read: the lines past the cut are lost,
     * so the read fails rather than end as if the file were whole (and its cut line read as a last line).
     * The read also stops there: what a writer appends meanwhile is not part of this read (its last line may be
     * half-written when the read reaches it, and would be read as a whole last line).
     */
    expectedEnd?: number;
  },
): AsyncGenerator<Line[]> {
  const stream = createReadStream(path, {
    start: options.start,
    highWaterMark: options.highWaterMark ?? 256 * 1024,
    // `end` is inclusive. (A read is never started at or past the end it must reach: there is nothing to read.)
    ...(options.expectedEnd !== undefined && options.expectedEnd > options.start
      ? { end: options.expectedEnd - 1 }
      : {}),
    ...(options.file ? borrowed(options.file) : {}),
  });
  let pending: Buffer | null = null; // bytes of an unfinished line
  let pendingStart = options.start;
  let skipping = false; // inside an oversized line, discarding until its newline
  let lineNumber = options.firstLineNumber;
  let position = options.start; // byte offset of the start of `chunk`
  try {
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      if (options.signal.aborted) return;
      const lines: Line[] = [];
      let from = 0;
      // The lines wholly inside this chunk (from its first newline to its last) are UTF-8 when that whole range is:
      // one check per chunk, not one per line (a newline byte is never inside a multi-byte character). Only when it
      // is not is each line checked on its own.
      const firstNl = chunk.indexOf(10);
      const inChunkUtf8 = firstNl >= 0 && isUtf8(chunk.subarray(firstNl + 1, chunk.lastIndexOf(10)));
      for (;;) {
        const nl = chunk.indexOf(10, from);
        if (nl < 0) break;
        const end = position + nl + 1;
        if (skipping) {
          lines.push(oversizedLine(lineNumber++, pendingStart, end));
          skipping = false;
        } else {
          let decoded: Decoded;
          const bytes = (pending?.length ?? 0) + (nl - from);
          if (pending !== null) {
            const whole = Buffer.concat([pending, chunk.subarray(from, nl)]);
            decoded = decodeLine(whole, 0, whole.length, false);
            pending = null;
          } else {
            pendingStart = position + from;
            decoded = decodeLine(chunk, from, nl, inChunkUtf8 && from > firstNl);
          }
          if (pendingStart === 0) decoded.text = withoutByteOrderMark(decoded.text);
          if (bytes > options.maxLineBytes) lines.push(oversizedLine(lineNumber++, pendingStart, end));
          else
            lines.push({
              text: decoded.text,
              number: lineNumber++,
              start: pendingStart,
              end,
              oversized: false,
              invalidUtf8: decoded.invalidUtf8,
              crlf: decoded.crlf,
            });
        }
        from = nl + 1;
        pendingStart = end;
      }
      if (from < chunk.length && !skipping) {
        const rest = chunk.subarray(from);
        if (pending === null) pendingStart = position + from;
        const size = (pending?.length ?? 0) + rest.length;
        if (size > options.maxLineBytes) {
          pending = null;
          skipping = true;
        } else pending = pending === null ? Buffer.from(rest) : Buffer.concat([pending, rest]);
      }
      position += chunk.length;
      if (lines.length > 0) yield lines;
    }
    if (options.expectedEnd !== undefined && position < options.expectedEnd && !options.signal.aborted)
      throw new SourceError(
        `File ${path} shrank while it was read: it had ${options.expectedEnd} bytes when the read began and ended at byte ${position} (truncated or rewritten in place); the records past the cut are lost, so it was not copied — send the transfer again once the file is complete`,
        { details: { path, expectedBytes: options.expectedEnd, endedAt: position } },
      );
    if (options.includePartialLast && (pending !== null || skipping)) {
      if (skipping || pending === null) yield [oversizedLine(lineNumber, pendingStart, position)];
      else {
        const decoded = decodeLine(pending, 0, pending.length, false);
        if (pendingStart === 0) decoded.text = withoutByteOrderMark(decoded.text);
        yield [{ ...decoded, number: lineNumber, start: pendingStart, end: position, oversized: false }];
      }
    }
  } finally {
    stream.destroy();
  }
}

/**
 * Stream options that read through a borrowed handle and leave it open. `autoClose: false` is not enough:
 * the `destroy()` that ends every read still closes a stream's descriptor, and the owner of the handle may
 * read it after the lines (the file source hashes the last line read).
 */
function borrowed(file: FileHandle) {
  return {
    fd: file.fd,
    autoClose: false,
    fs: { read, close: (_fd: number, done: (err: null) => void) => done(null) },
  };
}

/**
 * The first line's text without a UTF-8 byte order mark: Excel's "CSV UTF-8" and many Windows tools start a file
 * with one. It marks the encoding, it is no data: left in, it made the first JSON line malformed and renamed the
 * first CSV column (`\uFEFFid`). Byte offsets still count it (the line starts at 0), so positions are unchanged.
 */
function withoutByteOrderMark(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

const oversizedLine = (number: number, start: number, end: number): Line => ({
  text: '',
  number,
  start,
  end,
  oversized: true,
  invalidUtf8: false,
  crlf: false,
});

type Decoded = Pick<Line, 'text' | 'invalidUtf8' | 'crlf'>;

/**
 * A line's text, without the CR of a CRLF line end (which it notes). Bytes that are not UTF-8 are noted too:
 * `toString` would put U+FFFD in their place without a word, and the copy would hold other characters. `utf8`: the
 * caller already knows the bytes are UTF-8 (its chunk was checked whole).
 */
function decodeLine(buffer: Buffer, from: number, to: number, utf8: boolean): Decoded {
  const crlf = to > from && buffer[to - 1] === 13;
  const end = crlf ? to - 1 : to;
  return {
    text: buffer.toString('utf8', from, end),
    invalidUtf8: !utf8 && !isUtf8(buffer.subarray(from, end)),
    crlf,
  };
}
