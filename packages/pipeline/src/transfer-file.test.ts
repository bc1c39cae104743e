import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SluiceError, type TransferRequest } from '@sluice/core';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { memoryCheckpointPort } from '../test/helpers.js';
import { runTransfer, type TransferContext } from './transfer.js';

const jsonl = (n: number, from = 0) =>
  Array.from(
    { length: n },
    (_, i) => `${JSON.stringify({ id: from + i, name: `item-${from + i}`, value: (from + i) * 1.5 })}\n`,
  ).join('');

function request(
  id: string,
  source: string,
  destination: string,
  extra: Partial<TransferRequest> = {},
): TransferRequest {
  return {
    id,
    mode: 'idempotent',
    source: { type: 'file', path: source, format: source.endsWith('.csv') ? 'csv' : 'jsonl' },
    destination: { type: 'file', path: destination, format: 'jsonl' },
    properties: {},
    options: { onBadRecord: 'skip' },
    ...extra,
  };
}

const readIds = async (path: string) =>
  (await readFile(path, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((line) => (JSON.parse(line) as { id: number }).id);

/** `content` as the source file `input` in `dir`, and where the copy goes. */
async function filesIn(dir: string, content: string, input = 'in.jsonl', output = 'copy.jsonl') {
  const src = join(dir, input);
  await writeFile(src, content);
  return { src, out: join(dir, output) };
}

/** One run of `req` in this process: checkpoint in memory and no connections unless `ctx` says otherwise. */
const transfer = (req: TransferRequest, ctx: Partial<TransferContext> = {}) =>
  runTransfer(req, {
    checkpoint: memoryCheckpointPort(),
    connections: {},
    signal: new AbortController().signal,
    ...ctx,
  });

/** A run of `req` that terminates itself once it committed `epoch` (an owner stopped mid-transfer). */
function transferUntilEpoch(req: TransferRequest, epoch: number, ctx: Partial<TransferContext>) {
  const controller = new AbortController();
  return transfer(req, {
    signal: controller.signal,
    onProgress: (p) => {
      if (p.epoch >= epoch) controller.abort();
    },
    ...ctx,
  });
}

describe('file → file transfers', () => {
  it('copies every record and reports counts', async () => {
    await using dir = await tempDir();
    const { src, out } = await filesIn(dir.path, jsonl(2_500), 'in.jsonl', join('out', 'copy.jsonl'));
    const port = memoryCheckpointPort();
    const result = await transfer(request('t-copy', src, out), {
      checkpoint: port,
      commitEveryRecords: 1000,
    });
    expect(result).toMatchObject({
      recordsRead: 2500,
      recordsWritten: 2500,
      badRecords: 0,
      decision: 'from-scratch',
    });
    expect(await readIds(out)).toEqual(Array.from({ length: 2500 }, (_, i) => i));
    expect((port.value as { epoch: number }).epoch).toBeGreaterThanOrEqual(3);
  });

  it('resumes after a termination and writes each record once', async () => {
    await using dir = await tempDir();
    const { src, out } = await filesIn(dir.path, jsonl(5_000));
    const port = memoryCheckpointPort();
    const first = transferUntilEpoch(request('t-resume', src, out), 3, {
      checkpoint: port,
      commitEveryRecords: 500,
      fileChunkBytes: 4096,
    });
    await expect(first).rejects.toMatchObject({ code: 'TRANSFER_TERMINATED' });
    const written = (port.value as { epoch: number }).epoch;
    expect(written).toBeGreaterThanOrEqual(3);
    await expect(readFile(out)).rejects.toThrow(); // nothing visible before completion

    const second = await transfer(request('t-resume', src, out), {
      checkpoint: port,
      commitEveryRecords: 500,
      fileChunkBytes: 4096,
    });
    expect(second.decision).toBe('resume');
    expect(second.recordsWritten).toBe(5000);
    expect(await readIds(out)).toEqual(Array.from({ length: 5000 }, (_, i) => i));
  });

  it('starts from scratch when the source file changed', async () => {
    await using dir = await tempDir();
    const { src, out } = await filesIn(dir.path, jsonl(3_000));
    const port = memoryCheckpointPort();
    await expect(
      transferUntilEpoch(request('t-changed', src, out), 2, {
        checkpoint: port,
        commitEveryRecords: 500,
        fileChunkBytes: 4096,
      }),
    ).rejects.toMatchObject({ code: 'TRANSFER_TERMINATED' });
    await writeFile(src, jsonl(1_000, 10_000)); // rewritten with other content
    const result = await transfer(request('t-changed', src, out), { checkpoint: port });
    expect(result.decision).toBe('from-scratch');
    expect(result.reason).toMatch(/changed|shrank/);
    expect(await readIds(out)).toEqual(Array.from({ length: 1000 }, (_, i) => 10_000 + i));
  });

  it('skips and reports malformed JSON lines with their line and offset', async () => {
    await using dir = await tempDir();
    const lines = ['{"id":1}', '{"id":2', '[1,2]', '{"id":3}', 'not json', '{"id":4}'];
    const { src, out } = await filesIn(dir.path, `${lines.join('\n')}\n`);
    const result = await transfer(request('t-bad', src, out));
    expect(result).toMatchObject({ recordsRead: 6, recordsWritten: 3, badRecords: 3 });
    const offsetOf = (n: number) => lines.slice(0, n - 1).reduce((sum, l) => sum + l.length + 1, 0);
    expect(result.badRecordReports.map((r) => [r.line, r.offset])).toEqual([
      [2, offsetOf(2)],
      [3, offsetOf(3)],
      [5, offsetOf(5)],
    ]);
    expect(result.badRecordReports[0]!.reason).toMatch(/malformed JSON/);
    expect(await readIds(out)).toEqual([1, 3, 4]);
  });

  it('fails the run on the first bad record with policy "fail", writing nothing', async () => {
    await using dir = await tempDir();
    const { src, out } = await filesIn(dir.path, '{"id":1}\n{"id":2}\n{oops\n{"id":4}\n');
    const error = await transfer(request('t-fail', src, out, { options: { onBadRecord: 'fail' } })).catch(
      (e: unknown) => e,
    );
    expect(SluiceError.hasCode(error, 'BAD_RECORD')).toBe(true);
    expect((error as SluiceError).details).toMatchObject({ line: 3, offset: 18 });
    await expect(readFile(out)).rejects.toThrow();
  });

  it('reads CSV with quoted cells and reports rows with the wrong column count', async () => {
    await using dir = await tempDir();
    const { src, out } = await filesIn(
      dir.path,
      'id,name,note\n1,a,"x, y"\n2,b\n3,"multi\nline","say ""hi"""\n4,d,e,f\n5,e,\n',
      'in.csv',
    );
    const result = await transfer(request('t-csv', src, out));
    expect(result).toMatchObject({ recordsRead: 5, recordsWritten: 3, badRecords: 2 });
    expect(result.badRecordReports.map((r) => r.line)).toEqual([3, 6]);
    expect(result.badRecordReports[0]!.reason).toMatch(/expected 3 columns, got 2/);
    const rows = (await readFile(out, 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows).toEqual([
      { id: '1', name: 'a', note: 'x, y' },
      { id: '3', name: 'multi\nline', note: 'say "hi"' },
      { id: '5', name: 'e', note: '' },
    ]);
  });

  // A quoted cell may span lines, so an unclosed quote runs to the end of the file: the record that opened it
  // is the bad one, and the lines it swallowed must show in the report rather than vanish.
  const UNCLOSED_QUOTES = [
    { content: 'id,name\n1,a\n2,"oops\n3,c\n4,d\n', lines: 'lines 3–5' },
    { content: 'id,name\n1,a\n"4,unterminated\n', lines: 'line 3' },
    { content: 'id,name\n1,a\n"4,unterminated', lines: 'line 3' },
  ];

  it('defect: an unclosed CSV quote fails the run with BAD_RECORD under "fail" instead of dropping the rest', async () => {
    await using dir = await tempDir();
    for (const [i, { content }] of UNCLOSED_QUOTES.entries()) {
      const { src, out } = await filesIn(dir.path, content, `in-${i}.csv`, `out-${i}.jsonl`);
      const error = await transfer(
        request(`t-unclosed-fail-${i}`, src, out, { options: { onBadRecord: 'fail' } }),
      ).catch((e: unknown) => e);
      expect(SluiceError.hasCode(error, 'BAD_RECORD'), JSON.stringify(error)).toBe(true);
      expect((error as SluiceError).details).toMatchObject({ line: 3, offset: 12 });
      expect((error as SluiceError).message).toMatch(/unclosed quote/);
      await expect(readFile(out)).rejects.toThrow();
    }
  });

  it('defect: an unclosed CSV quote is one bad record under "skip", naming the lines it ran to', async () => {
    await using dir = await tempDir();
    for (const [i, { content, lines }] of UNCLOSED_QUOTES.entries()) {
      const { src, out } = await filesIn(dir.path, content, `in-${i}.csv`, `out-${i}.jsonl`);
      const result = await transfer(request(`t-unclosed-skip-${i}`, src, out));
      expect(result).toMatchObject({ recordsRead: 2, recordsWritten: 1, badRecords: 1 });
      expect(result.badRecordReports).toEqual([
        {
          source: expect.any(String),
          line: 3,
          offset: 12,
          reason: expect.stringContaining(`unclosed quote: the file ends inside the record of ${lines}`),
        },
      ]);
      expect(await readFile(out, 'utf8')).toBe('{"id":"1","name":"a"}\n');
    }
  });

  it('defect: numbers JSON cannot hold (integers past 2^53, 1e400) were copied changed, silently — each such record is a bad record now', async () => {
    await using dir = await tempDir();
    const lines = [
      '{"id":1,"n":9007199254740992,"big":"12345678901234567890","d":1.25,"e":2.5e3,"neg":-9007199254740991}',
      '{"id":2,"n":9007199254740993}',
      '{"id":3,"e":1e400}',
      '{"id":4,"nested":{"list":[1,{"x":-12345678901234567890}]}}',
      '{"id":5,"s":"a \\"quoted\\" 12345678901234567890 and 1e400 in a string"}',
    ];
    const { src, out } = await filesIn(dir.path, `${lines.join('\n')}\n`, 'in.jsonl', 'out.jsonl');
    const result = await transfer(request('t-inexact', src, out));
    expect(result).toMatchObject({ recordsRead: 5, recordsWritten: 2, badRecords: 3 });
    expect(result.badRecordReports.map((r) => [r.line, r.reason])).toEqual([
      [2, expect.stringContaining('9007199254740993 cannot be held exactly')],
      [3, expect.stringContaining('1e400 is out of range')],
      [4, expect.stringContaining('-12345678901234567890 cannot be held exactly')],
    ]);
    // What is copied is copied unchanged.
    expect(
      (await readFile(out, 'utf8'))
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l)),
    ).toEqual([JSON.parse(lines[0]!), JSON.parse(lines[4]!)]);
    const failed = await transfer(
      request('t-inexact-fail', src, join(dir.path, 'fail.jsonl'), { options: { onBadRecord: 'fail' } }),
    ).catch((e: unknown) => e);
    expect(SluiceError.hasCode(failed, 'BAD_RECORD')).toBe(true);
  });

  it('defect: the CSV sink writes an empty cell, not {}, where a record has no "__proto__" field', async () => {
    await using dir = await tempDir();
    // JSON.parse makes "__proto__" an own field, as any other name.
    const { src, out } = await filesIn(
      dir.path,
      '{"__proto__":"p1","id":1}\n{"id":2}\n{"__proto__":null,"id":3}\n',
      'in.jsonl',
      'out.csv',
    );
    const result = await transfer(
      request('t-csv-proto', src, out, { destination: { type: 'file', path: out, format: 'csv' } }),
    );
    expect(result).toMatchObject({ recordsRead: 3, recordsWritten: 3, badRecords: 0 });
    expect(await readFile(out, 'utf8')).toBe('__proto__,id\np1,1\n,2\n,3\n');
  });

  it("defect: the CSV sink dropped the fields of a record that the header (its first record's fields) has no column for, and reported it written", async () => {
    await using dir = await tempDir();
    const { src, out } = await filesIn(
      dir.path,
      '{"id":1,"a":1}\n{"id":2,"b":2}\n{"id":3,"a":3,"c":"z"}\n{"id":4}\n',
      'in.jsonl',
      'out.csv',
    );
    const toCsv = (id: string, onBadRecord: 'skip' | 'fail', path: string) =>
      request(id, src, path, {
        destination: { type: 'file', path, format: 'csv' },
        options: { onBadRecord },
      });

    const failed = await transfer(toCsv('t-csv-fields-fail', 'fail', join(dir.path, 'fail.csv'))).catch(
      (e: unknown) => e,
    );
    expect(SluiceError.hasCode(failed, 'BAD_RECORD'), JSON.stringify(failed)).toBe(true);
    expect((failed as Error).message).toMatch(/line 2\b.*\bb\b.*id, a/);
    await expect(readFile(join(dir.path, 'fail.csv'), 'utf8')).rejects.toThrow(/ENOENT/);

    const result = await transfer(toCsv('t-csv-fields', 'skip', out));
    expect(result).toMatchObject({ recordsRead: 4, recordsWritten: 2, badRecords: 2 });
    expect(result.badRecordReports.map((r) => [r.line, r.reason])).toEqual([
      [2, "field(s) b are not columns of the CSV file (id, a: the first record's fields)"],
      [3, "field(s) c are not columns of the CSV file (id, a: the first record's fields)"],
    ]);
    // A record lacking a column still gets its empty cell.
    expect(await readFile(out, 'utf8')).toBe('id,a\n1,1\n4,\n');
  });

  it('defect: a UTF-8 byte order mark (as Excel and Windows tools write) made the first JSON line a bad record and renamed the first CSV column', async () => {
    await using dir = await tempDir();
    const bom = '\uFEFF';
    const json = await filesIn(
      dir.path,
      `${bom}{"id":1,"name":"a"}\r\n{"id":2,"name":"b"}\r\n`,
      'bom.jsonl',
      'bom-copy.jsonl',
    );
    const fromJson = await transfer(request('t-bom-jsonl', json.src, json.out));
    expect(fromJson).toMatchObject({ recordsRead: 2, recordsWritten: 2, badRecords: 0 });
    expect(await readFile(json.out, 'utf8')).toBe('{"id":1,"name":"a"}\n{"id":2,"name":"b"}\n');

    const csv = await filesIn(dir.path, `${bom}id,name\r\n1,a\r\n2,b\r\n`, 'bom.csv', 'bom-csv.jsonl');
    const fromCsv = await transfer(request('t-bom-csv', csv.src, csv.out));
    expect(fromCsv).toMatchObject({ recordsRead: 2, recordsWritten: 2, badRecords: 0 });
    expect(await readFile(csv.out, 'utf8')).toBe('{"id":"1","name":"a"}\n{"id":"2","name":"b"}\n');
  });

  it('defect: a CSV header naming a column twice kept only the last cell of each row under that name, silently', async () => {
    await using dir = await tempDir();
    const { src, out } = await filesIn(dir.path, 'id,a, a\n1,2,3\n4,5,6\n', 'dup.csv', 'dup.jsonl');
    const failed = await transfer(request('t-csv-dup-header', src, out)).catch((e: unknown) => e);
    expect(SluiceError.hasCode(failed, 'SOURCE_FAILED'), JSON.stringify(failed)).toBe(true);
    expect((failed as Error).message).toMatch(/CSV header names column "a" twice \(columns 2 and 3\)/);
    await expect(readFile(out, 'utf8')).rejects.toThrow(/ENOENT/);
  });
});
