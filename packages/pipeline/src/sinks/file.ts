import { createHash, randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { copyFile, mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { type PipelineCheckpoint, SinkError } from '@sluice/core';
import { z } from 'zod';
import type { RecordOp } from '../ops.js';
import { ownField } from '../own.js';
import { formatCsvRecord } from '../sources/csv.js';
import { type PipelineSink, type SinkFence, type SinkWriteResult, UNFENCED } from '../types.js';

/** What the file sink records in its checkpoint position: its run's private temp file and its length. */
const FilePositionSchema = z.object({
  // `e<epoch>.<random>` (older versions: the random part only).
  run: z.string().regex(/^(e\d{1,15}\.)?[0-9a-f]{16}$/),
  bytes: z.number().int().nonnegative(),
  columns: z.array(z.string().max(10_000)).max(10_000).nullable(),
});
type FilePosition = z.output<typeof FilePositionSchema>;

export interface FileSinkOptions {
  handle: string;
  path: string;
  format: 'jsonl' | 'csv';
  /** Identifies the writer (the transfer id), so two transfers never share a temp file. */
  writerId: string;
  /** The run's epoch and fenced finishing step (the transfer's checkpoint port). Default: unfenced (epoch 0). */
  fence?: SinkFence;
}

/**
 * Why a record cannot be a row of a CSV file whose header is `columns`, or null: a field the header has no column
 * for. The header is written with the first record (a file is streamed, never rewritten), so such a field would be
 * silently dropped; the record is a bad record instead. A missing field is fine: its cell is empty.
 */
function csvFieldsProblem(
  record: Record<string, unknown>,
  columns: ReadonlySet<string>,
  header: string[],
): string | null {
  const unknown = Object.keys(record).filter((field) => !columns.has(field));
  if (unknown.length === 0) return null;
  const shown = header.length > 20 ? `${header.slice(0, 20).join(', ')}, …` : header.join(', ');
  return `field(s) ${unknown.join(', ')} are not columns of the CSV file (${shown}: the first record's fields)`;
}

/** The most bytes a file name may have (Linux, macOS and Windows file systems alike). */
const NAME_MAX = 255;
/** The longest run part of a temp name and its suffix: `e<15-digit epoch>.<16 hex>.partial`. */
const LONGEST_RUN_SUFFIX = 'e'.length + 15 + '.'.length + 16 + '.partial'.length;

/**
 * The prefix of every temp file name of `tag`'s runs writing `name`: `.<name>.<tag>.`. A name too long to carry the
 * rest of a temp name (over 214 bytes, though a file may have 255) is stood in for by a hash of it — the run could
 * not create its temp file otherwise, and the transfer failed with ENAMETOOLONG after it was accepted.
 */
function tempPrefix(name: string, tag: string): string {
  const prefix = `.${name}.${tag}.`;
  if (Buffer.byteLength(prefix) + LONGEST_RUN_SUFFIX <= NAME_MAX) return prefix;
  return `.${createHash('sha256').update(name).digest('hex').slice(0, 16)}.${tag}.`;
}

/** The epoch a temp file name carries (`<prefix>e<epoch>.<run>.partial`); names of older versions are epoch 0. */
const epochOfTemp = (rest: string): number => {
  const match = /^e(\d{1,15})\./.exec(rest);
  return match ? Number(match[1]) : 0;
};

/**
 * Writes JSON Lines (or CSV) to a temp file next to `path` and renames it into place when the transfer
 * completes, so readers never see a partial file. A CSV file's header is the first record's fields: a later record
 * with a field it has no column for is refused (a bad record), never written with that field dropped.
 *
 * The temp file is private to one run (named with the run's epoch and a random run id,
 * `.<name>.<tag>.e<epoch>.<run>.partial`, a hash standing in for a name too long to carry the rest): two owners of one transfer (a stale one that was frozen past its
 * lease, and the one that took over) never write into the same file. Each
 * commit fsyncs the temp file; the run id and the committed length travel in the checkpoint (the sink's
 * position), which the caller saves through its fenced checkpoint port. A resumed run copies the
 * committed prefix of the previous run's temp file into a new private one and continues there, so every
 * record ends up exactly once. Publishing is fenced: right before the rename the sink calls the store's
 * `finishing()` step, which refuses (`STALE_EPOCH`) once a newer epoch owns the transfer, so a stale owner
 * that wakes up publishes nothing. On completion only temps of *older* epochs are removed — never the current
 * epoch's or a newer one's, which may belong to the owner that took over.
 *
 * @example
 * ```ts
 * const sink = createFileSink({ handle: 't1.sink', path: '/out/orders.jsonl', format: 'jsonl', writerId: 't1' });
 * ```
 */
export function createFileSink(options: FileSinkOptions): PipelineSink {
  const tag = createHash('sha256').update(options.writerId).digest('hex').slice(0, 16);
  const directory = dirname(options.path);
  // Every temp file of this writer starts with this prefix (also the unsuffixed one of older versions).
  const prefix = tempPrefix(basename(options.path), tag);
  const tempOf = (run: string) => join(directory, `${prefix}${run}.partial`);
  const fence = options.fence ?? UNFENCED;
  const run = `e${fence.epoch}.${randomBytes(8).toString('hex')}`;
  const temp = tempOf(run);
  let handle: FileHandle | null = null;
  let bytes = 0;
  let pending = 0;
  let columns: string[] | null = null;
  /** The same columns, to check every record's fields against. */
  let columnSet: ReadonlySet<string> = new Set();
  let buffer: string[] = [];

  /** The previous run's position in `checkpoint`, when its temp file still holds the committed prefix. */
  const committedPrefix = async (checkpoint: PipelineCheckpoint | null): Promise<FilePosition | null> => {
    const parsed = FilePositionSchema.safeParse(checkpoint?.positions[options.handle]);
    if (!parsed.success) return null;
    try {
      return (await stat(tempOf(parsed.data.run))).size >= parsed.data.bytes ? parsed.data : null;
    } catch {
      return null;
    }
  };

  const flush = async () => {
    if (buffer.length === 0 || handle === null) return;
    const data = Buffer.from(buffer.join(''));
    buffer = [];
    pending = 0;
    await handle.write(data, 0, data.length, bytes);
    bytes += data.length;
  };

  /** The new run's temp file; its directory is created only when missing (one call fewer per transfer). */
  const createTemp = async (): Promise<FileHandle> => {
    try {
      return await open(temp, 'wx');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      await mkdir(directory, { recursive: true });
      return await open(temp, 'wx');
    }
  };

  const push = (line: string) => {
    buffer.push(line);
    pending += Buffer.byteLength(line);
  };

  /**
   * Temp files of this writer whose epoch passes `keep === false` (`all` for discard). After a publish only
   * older epochs go: nobody resumes from them now, while a newer epoch's temp belongs to a live owner.
   */
  const removeTemps = async (which: 'older' | 'all') => {
    const names = await readdir(directory).catch(() => [] as string[]);
    await Promise.all(
      names
        .filter((n) => n.startsWith(prefix))
        .filter((n) => which === 'all' || epochOfTemp(n.slice(prefix.length)) < fence.epoch)
        .map((n) => rm(join(directory, n), { force: true })),
    );
  };

  return {
    handle: options.handle,
    description: { type: 'file', path: options.path, format: options.format },
    keyFields: [],
    keepsCheckpoint: true,
    async committed(pipeline) {
      // The fsynced temp file is committed data; the checkpoint that names it is the committed checkpoint.
      return (await committedPrefix(pipeline ?? null)) !== null ? (pipeline ?? null) : null;
    },
    position() {
      return { run, bytes: bytes + pending, columns } satisfies FilePosition;
    },
    async prepare({ decision, checkpoint }) {
      try {
        const previous = decision === 'resume' ? await committedPrefix(checkpoint) : null;
        if (decision === 'resume' && previous === null)
          throw new Error('the temp file of the checkpointed run is gone or shorter than committed');
        if (previous !== null) {
          // A copy, never the file itself: the previous owner may still be alive and writing to it.
          await copyFile(tempOf(previous.run), temp, constants.COPYFILE_EXCL);
          handle = await open(temp, 'r+');
          await handle.truncate(previous.bytes);
        } else handle = await createTemp();
        bytes = previous?.bytes ?? 0;
        columns = previous?.columns ?? null;
        columnSet = new Set(columns ?? []);
      } catch (err) {
        throw new SinkError(`Cannot open ${temp}: ${(err as Error).message}`, { cause: err });
      }
    },
    async write(ops: RecordOp[]) {
      let refused: SinkWriteResult['refused'] | null = null;
      for (const op of ops) {
        if (op.op === 'delete') continue; // a file has no place for deletes
        if (options.format === 'jsonl') push(`${JSON.stringify(op.record)}\n`);
        else {
          if (columns === null) {
            columns = Object.keys(op.record);
            columnSet = new Set(columns);
            push(`${formatCsvRecord(columns)}\n`);
          }
          const record = op.record;
          const problem = csvFieldsProblem(record, columnSet, columns);
          if (problem !== null) {
            // A bad record (the transfer's `onBadRecord` decides), never written with a field dropped.
            refused ??= [];
            refused.push({ op, reason: problem });
            continue;
          }
          // A record without a column gets an empty cell, even one named after an Object.prototype member.
          push(`${formatCsvRecord(columns.map((c) => ownField(record, c)))}\n`);
        }
      }
      if (buffer.length >= 4096) await flush();
      return refused === null ? undefined : { refused };
    },
    async commit(_checkpoint: PipelineCheckpoint) {
      await flush();
      await handle?.sync();
    },
    async finish() {
      try {
        await flush();
        await handle?.sync();
        await handle?.close();
        handle = null;
      } catch (err) {
        throw new SinkError(`Cannot publish ${options.path}: ${(err as Error).message}`, { cause: err });
      }
      // Fenced in the store right before the one effect that cannot be taken back: a stale owner stops here
      // with STALE_EPOCH, leaving its temp (the new owner removes it as an older epoch's).
      await fence.finishing();
      try {
        await rename(temp, options.path);
      } catch (err) {
        throw new SinkError(`Cannot publish ${options.path}: ${(err as Error).message}`, { cause: err });
      }
      // A first epoch has no older ones (epoch 0 is an unfenced run's, not an earlier owner of this transfer's):
      // no directory listing per published file then.
      if (fence.epoch > 1) await removeTemps('older');
    },
    async discard() {
      await handle?.close();
      handle = null;
      // The transfer ended for good (FAILED / TERMINATED): nothing resumes from any epoch's temp.
      await removeTemps('all');
    },
    async close() {
      await handle?.close();
      handle = null;
    },
  };
}
