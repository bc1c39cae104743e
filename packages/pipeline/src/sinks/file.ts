import { createHash } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import { mkdir, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { type PipelineCheckpoint, PipelineCheckpointSchema, SinkError } from '@sluice/core';
import { z } from 'zod';
import type { RecordOp } from '../ops.js';
import { formatCsvRecord } from '../sources/csv.js';
import type { PipelineSink } from '../types.js';

const SidecarSchema = z.object({
  checkpoint: PipelineCheckpointSchema,
  bytes: z.number().int().nonnegative(),
  columns: z.array(z.string()).nullable(),
});
type Sidecar = z.output<typeof SidecarSchema>;

export interface FileSinkOptions {
  handle: string;
  path: string;
  format: 'jsonl' | 'csv';
  /** Identifies the writer (the transfer id), so two transfers never share a temp file. */
  writerId: string;
}

/**
 * Writes JSON Lines (or CSV) to a temp file next to `path` and renames it into place when the transfer
 * completes, so readers never see a partial file. Each commit fsyncs the temp file and records its length
 * with the checkpoint (in a sidecar file, replaced atomically); a resumed transfer truncates the temp file
 * back to the committed length, so every record ends up exactly once.
 *
 * @example
 * ```ts
 * const sink = createFileSink({ handle: 't1.sink', path: '/out/orders.jsonl', format: 'jsonl', writerId: 't1' });
 * ```
 */
export function createFileSink(options: FileSinkOptions): PipelineSink {
  const tag = createHash('sha256').update(options.writerId).digest('hex').slice(0, 16);
  const temp = join(dirname(options.path), `.${basename(options.path)}.${tag}.partial`);
  const sidecar = `${temp}.checkpoint.json`;
  let handle: FileHandle | null = null;
  let bytes = 0;
  let columns: string[] | null = null;
  let buffer: string[] = [];

  const readSidecar = async (): Promise<Sidecar | null> => {
    try {
      const parsed = SidecarSchema.safeParse(JSON.parse(await readFile(sidecar, 'utf8')));
      if (!parsed.success) return null;
      const size = (await stat(temp)).size;
      return size >= parsed.data.bytes ? parsed.data : null;
    } catch {
      return null;
    }
  };

  const flush = async () => {
    if (buffer.length === 0 || handle === null) return;
    const data = Buffer.from(buffer.join(''));
    buffer = [];
    await handle.write(data, 0, data.length, bytes);
    bytes += data.length;
  };

  return {
    handle: options.handle,
    description: { type: 'file', path: options.path, format: options.format },
    keyFields: [],
    keepsCheckpoint: true,
    async committed() {
      return (await readSidecar())?.checkpoint ?? null;
    },
    async prepare({ decision }) {
      try {
        await mkdir(dirname(options.path), { recursive: true });
        const previous = decision === 'resume' ? await readSidecar() : null;
        if (previous === null) await rm(sidecar, { force: true });
        handle = await open(temp, previous === null ? 'w' : 'r+');
        bytes = previous?.bytes ?? 0;
        columns = previous?.columns ?? null;
        await handle.truncate(bytes);
      } catch (err) {
        throw new SinkError(`Cannot open ${temp}: ${(err as Error).message}`, { cause: err });
      }
    },
    async write(ops: RecordOp[]) {
      for (const op of ops) {
        if (op.op === 'delete') continue; // a file has no place for deletes
        if (options.format === 'jsonl') buffer.push(`${JSON.stringify(op.record)}\n`);
        else {
          if (columns === null) {
            columns = Object.keys(op.record);
            buffer.push(`${formatCsvRecord(columns)}\n`);
          }
          const record = op.record;
          buffer.push(`${formatCsvRecord(columns.map((c) => record[c]))}\n`);
        }
      }
      if (buffer.length >= 4096) await flush();
    },
    async commit(checkpoint: PipelineCheckpoint) {
      await flush();
      await handle?.sync();
      const next = `${sidecar}.next`;
      await writeFile(next, JSON.stringify({ checkpoint, bytes, columns } satisfies Sidecar));
      await rename(next, sidecar);
    },
    async finish() {
      await flush();
      await handle?.sync();
      await handle?.close();
      handle = null;
      await rename(temp, options.path);
      await rm(sidecar, { force: true });
    },
    async close() {
      await handle?.close();
      handle = null;
    },
  };
}
