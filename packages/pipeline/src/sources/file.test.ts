import { execFileSync } from 'node:child_process';
import { appendFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FieldType } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import type { SourceItem } from '../types.js';
import { createFileSource } from './file.js';

async function collect(
  source: ReturnType<typeof createFileSource>,
  from: unknown | null,
  options: { mode?: 'transfer' | 'endpoint'; until?: (items: SourceItem[]) => boolean } = {},
) {
  const controller = new AbortController();
  const items: SourceItem[] = [];
  try {
    for await (const item of source.read(from, {
      signal: controller.signal,
      mode: options.mode ?? 'transfer',
      batchSize: 2,
    })) {
      items.push(item);
      if (options.until?.(items)) break;
    }
  } finally {
    controller.abort();
  }
  return items;
}
const records = (items: SourceItem[]) =>
  items.flatMap((i) =>
    i.kind === 'records' ? i.ops.map((op) => (op.op === 'delete' ? op.key : op.record)) : [],
  );
const lastPosition = (items: SourceItem[]) => items[items.length - 1]!.position;

describe('file source', () => {
  it('resumes from a byte offset when the file only grew, and refuses a rewritten or truncated file', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'a.jsonl');
    await writeFile(path, '{"id":1}\n{"id":2}\n{"id":3}\n');
    const source = createFileSource({ handle: 's', path, format: 'jsonl' });
    const first = await collect(source, null);
    expect(records(first)).toEqual([{ id: 1 }, { id: 2 }, { id: 3 }]);
    const position = lastPosition(first);
    expect(position).toMatchObject({ offset: 27, line: 3, read: 3 });

    await appendFile(path, '{"id":4}\n');
    expect(await source.canResume(position)).toEqual({ ok: true });
    const second = await collect(source, position);
    expect(records(second)).toEqual([{ id: 4 }]);
    expect(second.find((i) => i.kind === 'records')).toMatchObject({
      ops: [{ at: { line: 4, offset: 27 } }],
    });

    await writeFile(path, '{"id":1}\n{"id":2}\n{"id":9}\n{"id":4}\n'); // same length, one line differs
    expect(await source.canResume(position)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/changed/),
    });
    await writeFile(path, '{"id":1}\n');
    expect(await source.canResume(position)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/shrank/),
    });
  });

  it('defect: a source resumed at the end of its file reported the whole file as lag', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'a.jsonl');
    await writeFile(path, '{"id":1}\n{"id":2}\n{"id":3}\n');
    const first = createFileSource({ handle: 's', path, format: 'jsonl' });
    const position = lastPosition(await collect(first, null));
    expect(first.lag?.()).toBe(0);

    // A restarted process: a new source resumes where the first one committed, with nothing new to read.
    const resumed = createFileSource({ handle: 's', path, format: 'jsonl' });
    const items = await collect(resumed, position);
    expect(records(items)).toEqual([]);
    expect(items.map((i) => i.kind)).toEqual(['snapshot-done']);
    expect(resumed.lag?.()).toBe(0);

    // A followed file resumed where it was committed: only what was appended since is behind.
    await appendFile(path, '{"id":4}\n');
    const followed = createFileSource({ handle: 's', path, format: 'jsonl', follow: true, pollMs: 20 });
    const caughtUp = await collect(followed, position, {
      mode: 'endpoint',
      until: (seen) => seen.some((i) => i.kind === 'snapshot-done'),
    });
    expect(records(caughtUp)).toEqual([{ id: 4 }]);
    expect(followed.lag?.()).toBe(0);
  });

  it('types CSV columns from the schema and reports cells that do not convert', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'a.csv');
    await writeFile(
      path,
      'id,price,ok,when\r\n1,2.5,true,2026-01-02\r\n2,abc,false,2026-01-03\r\n3,,1,nope\r\n4,7,0,\r\n',
    );
    const source = createFileSource({
      handle: 's',
      path,
      format: 'csv',
      fields: { id: 'integer', price: 'number', ok: 'boolean', when: 'timestamp' },
    });
    const items = await collect(source, null);
    expect(records(items)).toEqual([
      { id: 1, price: 2.5, ok: true, when: '2026-01-02' },
      { id: 4, price: 7, ok: false, when: null },
    ]);
    const bad = items.flatMap((i) => (i.kind === 'records' ? i.bad : []));
    expect(bad.map((b) => [b.line, b.reason])).toEqual([
      [3, 'column "price": expected a number, got "abc"'],
      [4, 'column "when": expected an ISO timestamp, got "nope"'],
    ]);
  });

  it('defect: CSV columns named "__proto__" or "constructor" are own fields, typed or not', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'a.csv');
    await writeFile(path, 'id,__proto__,constructor,toString\n1,p,c,7\n');
    // The schema types "toString" only: the other names must not find Object.prototype's members as types.
    const fields = Object.fromEntries([
      ['id', 'integer'],
      ['toString', 'integer'],
    ]) as Record<string, FieldType>;
    const source = createFileSource({ handle: 's', path, format: 'csv', fields });
    const items = await collect(source, null);
    expect(items.flatMap((i) => (i.kind === 'records' ? i.bad : []))).toEqual([]);
    const [record] = records(items) as Record<string, unknown>[];
    expect(Object.getPrototypeOf(record)).toBe(Object.prototype);
    expect(Object.entries(record!)).toEqual([
      ['id', 1],
      ['__proto__', 'p'],
      ['constructor', 'c'],
      ['toString', 7],
    ]);
  });

  it('holds a CSV record whose quote is still open at the end of a followed file until the file grows', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'a.csv');
    await writeFile(path, 'id,note\n1,"two\n');
    const source = createFileSource({ handle: 's', path, format: 'csv', follow: true, pollMs: 20 });
    const seen: SourceItem[] = [];
    const reading = collect(source, null, {
      mode: 'endpoint',
      until: (items) => {
        seen.splice(0, seen.length, ...items);
        return records(items).length >= 1;
      },
    });
    await new Promise((r) => setTimeout(r, 100));
    // A writer may still be writing the rest of the quoted cell: no record and no bad record yet.
    expect(records(seen)).toEqual([]);
    expect(seen.flatMap((i) => (i.kind === 'records' ? i.bad : []))).toEqual([]);
    await appendFile(path, 'lines"\n');
    const items = await reading;
    expect(records(items)).toEqual([{ id: '1', note: 'two\nlines' }]);
    expect(items.flatMap((i) => (i.kind === 'records' ? i.bad : []))).toEqual([]);
  });

  it('defect: a CSV record still open at the end of a batch left the fingerprint of an earlier line, so the position could not resume ("the last line read differs")', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'a.csv');
    // Three whole records (a batch of two, then one), then one whose quoted cell is still being written.
    await writeFile(path, 'id,note\n1,one\n2,two\n3,three\n4,"four\n');
    const source = createFileSource({ handle: 's', path, format: 'csv', follow: true, pollMs: 20 });
    const items = await collect(source, null, {
      mode: 'endpoint',
      until: (seen) => seen.some((i) => i.kind === 'snapshot-done'),
    });
    expect(records(items)).toEqual([
      { id: '1', note: 'one' },
      { id: '2', note: 'two' },
      { id: '3', note: 'three' },
    ]);
    const position = lastPosition(items);
    // The position stops before the open record, and its fingerprint is the line just before it.
    expect(position).toMatchObject({ offset: 'id,note\n1,one\n2,two\n3,three\n'.length, line: 4 });
    expect(await source.canResume(position)).toEqual({ ok: true });
    // The open record is re-read from its first line once it is complete.
    await appendFile(path, 'lines"\n');
    const rest = await collect(source, position, {
      mode: 'endpoint',
      until: (seen) => records(seen).length >= 1,
    });
    expect(records(rest)).toEqual([{ id: '4', note: 'four\nlines' }]);
  });

  it('a missing path, a directory or a FIFO is SOURCE_FAILED naming the path (a FIFO without a writer does not hang the read)', async () => {
    await using dir = await tempDir();
    const fifo = join(dir.path, 'fifo.jsonl');
    execFileSync('mkfifo', [fifo]);
    for (const path of [join(dir.path, 'missing.jsonl'), dir.path, fifo]) {
      const source = createFileSource({ handle: 's', path, format: 'jsonl' });
      await expect(collect(source, null)).rejects.toMatchObject({
        code: 'SOURCE_FAILED',
        message: expect.stringContaining(`Cannot read file ${path}`),
      });
    }
  });

  it('a file truncated while a one-time read reads it is SOURCE_FAILED, its cut line never read as a record', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'a.jsonl');
    const lines = Array.from({ length: 400 }, (_, i) => JSON.stringify({ id: i + 1, pad: 'x'.repeat(40) }));
    await writeFile(path, `${lines.join('\n')}\n`);
    const source = createFileSource({ handle: 's', path, format: 'jsonl', chunkBytes: 1024 });
    const seen: SourceItem[] = [];
    const reading = collect(source, null, {
      until: (items) => {
        seen.push(items[items.length - 1]!);
        if (seen.length === 1) execFileSync('truncate', ['-s', '5000', path]);
        return false;
      },
    });
    await expect(reading).rejects.toMatchObject({
      code: 'SOURCE_FAILED',
      message: expect.stringContaining(`File ${path} shrank while it was read`),
    });
    // What was read before the error are whole records of the original file, none of them bad.
    expect(seen.flatMap((i) => (i.kind === 'records' ? i.bad : []))).toEqual([]);
    expect(records(seen).length).toBeLessThan(400);
  });

  it('reports over-long lines as bad records and keeps going', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'a.jsonl');
    await writeFile(path, `{"id":1}\n{"id":2,"pad":"${'x'.repeat(5000)}"}\n{"id":3}\n`);
    const source = createFileSource({
      handle: 's',
      path,
      format: 'jsonl',
      maxLineBytes: 1024,
      chunkBytes: 512,
    });
    const items = await collect(source, null);
    expect(records(items)).toEqual([{ id: 1 }, { id: 3 }]);
    const bad = items.flatMap((i) => (i.kind === 'records' ? i.bad : []));
    expect(bad).toMatchObject([{ line: 2, offset: 9, reason: 'line longer than 1024 bytes' }]);
  });

  it('follows a growing file, holding back a line still being written', async () => {
    await using dir = await tempDir();
    const path = join(dir.path, 'a.jsonl');
    await writeFile(path, '{"id":1}\n');
    const source = createFileSource({ handle: 's', path, format: 'jsonl', follow: true, pollMs: 20 });
    const seen: SourceItem[] = [];
    const reading = collect(source, null, {
      mode: 'endpoint',
      until: (items) => {
        seen.splice(0, seen.length, ...items);
        return records(items).length >= 3;
      },
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(seen.map((i) => i.kind)).toEqual(['records', 'snapshot-done']);
    await appendFile(path, '{"id":2}\n{"id":');
    await new Promise((r) => setTimeout(r, 100));
    expect(records(seen)).toEqual([{ id: 1 }, { id: 2 }]);
    await appendFile(path, '3}\n');
    const items = await reading;
    expect(records(items)).toEqual([{ id: 1 }, { id: 2 }, { id: 3 }]);
  });
});
