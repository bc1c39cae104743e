/**
 * File transfers as a demanding new user tries them, through the real HTTP API of an app-server process with real
 * files: names the file system takes, bytes that are not UTF-8, CSV cells holding CRLF, JSON objects that name a
 * key twice, numbers a double cannot hold, a source that grows while it is read. Each transfer either copies the data
 * exactly or says which record it could not copy — never a changed value without a word.
 */
import { appendFile, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, type NodeProcess, startNodeProcess } from './helpers.js';

type Format = 'jsonl' | 'csv';

/** Submits a file → file transfer and waits for its final record. */
async function transfer(
  node: NodeProcess,
  id: string,
  from: { path: string; format: Format },
  to: { path: string; format: Format },
  options: Record<string, unknown> = {},
) {
  const submitted = await call(`${node.url}/v1/transfers`, {
    json: {
      id,
      mode: 'idempotent',
      source: { type: 'file', ...from },
      destination: { type: 'file', ...to },
      options,
    },
  });
  expect(submitted.status, JSON.stringify(submitted.body)).toBe(201);
  return finalRecord(node, id);
}

async function finalRecord(node: NodeProcess, id: string) {
  return waitFor(
    async () => {
      const reply = await call(`${node.url}/v1/transfers/${id}`);
      return ['COMPLETED', 'FAILED', 'TERMINATED'].includes(reply.body?.state) ? reply.body : null;
    },
    { timeoutMs: 120_000, intervalMs: 100, what: `transfer ${id} to end` },
  );
}

/**
 * Copies `source` to JSON Lines in `dir` twice: skipping bad records (`<id>`, into `out.jsonl`) and failing at the
 * first (`<id>-fail`, into `out-fail.jsonl`). Both final records.
 */
async function copySkippingThenFailing(
  node: NodeProcess,
  dir: string,
  id: string,
  source: { path: string; format: Format },
) {
  const done = await transfer(node, id, source, { path: join(dir, 'out.jsonl'), format: 'jsonl' });
  const failed = await transfer(
    node,
    `${id}-fail`,
    source,
    { path: join(dir, 'out-fail.jsonl'), format: 'jsonl' },
    { onBadRecord: 'fail' },
  );
  return { done, failed };
}

const outcome = (record: {
  state: string;
  result: { recordsRead: number; recordsWritten: number; badRecords: number } | null;
  error: { code: string; message: string } | null;
}) => ({
  state: record.state,
  read: record.result?.recordsRead,
  written: record.result?.recordsWritten,
  bad: record.result?.badRecords,
  error: record.error?.code,
});

describe('file transfers at the edges of what a file may hold', { timeout: 180_000 }, () => {
  it('defect: a destination whose name is valid (216 bytes) but too long to carry the temp file suffix FAILED with ENAMETOOLONG', async () => {
    await using dir = await tempDir('ftx-long-name-');
    await using node = await startNodeProcess(localNode('ftx-long', dir.path));
    const source = join(dir.path, 'in.jsonl');
    await writeFile(source, '{"id":1}\n{"id":2}\n');
    // 70 three-byte characters and ".jsonl": 216 bytes, well under the 255 a name may have.
    const name = `${'日'.repeat(70)}.jsonl`;
    const destination = join(dir.path, name);

    const done = await transfer(
      node,
      'long-name',
      { path: source, format: 'jsonl' },
      { path: destination, format: 'jsonl' },
    );

    expect(outcome(done)).toEqual({ state: 'COMPLETED', read: 2, written: 2, bad: 0, error: undefined });
    expect(await readFile(destination, 'utf8')).toBe('{"id":1}\n{"id":2}\n');
    // The temp file was renamed into place: nothing beside it.
    expect((await readdir(dir.path)).filter((n) => n.startsWith('.'))).toEqual([]);
  });

  it('defect: bytes that are not UTF-8 in a JSONL line were copied as U+FFFD without a word', async () => {
    await using dir = await tempDir('ftx-utf8-');
    await using node = await startNodeProcess(localNode('ftx-utf8', dir.path));
    const source = join(dir.path, 'latin1.jsonl');
    // "café" written by a Latin-1 tool: 0xE9 alone is no UTF-8.
    await writeFile(
      source,
      Buffer.concat([Buffer.from('{"id":1,"name":"caf'), Buffer.from([0xe9]), Buffer.from('"}\n{"id":2}\n')]),
    );

    const { done: skipped, failed } = await copySkippingThenFailing(node, dir.path, 'utf8-skip', {
      path: source,
      format: 'jsonl',
    });
    expect(outcome(skipped)).toEqual({ state: 'COMPLETED', read: 2, written: 1, bad: 1, error: undefined });
    expect(await readFile(join(dir.path, 'out.jsonl'), 'utf8')).toBe('{"id":2}\n');

    expect(outcome(failed)).toMatchObject({ state: 'FAILED', error: 'BAD_RECORD' });
    expect(failed.error.message).toMatch(/at line 1, offset 0: .*not valid UTF-8/);
  });

  it('defect: bytes that are not UTF-8 in a CSV cell were copied as U+FFFD without a word', async () => {
    await using dir = await tempDir('ftx-utf8-csv-');
    await using node = await startNodeProcess(localNode('ftx-utf8c', dir.path));
    const source = join(dir.path, 'latin1.csv');
    await writeFile(
      source,
      Buffer.concat([
        Buffer.from('id,name\r\n1,ok\r\n2,"caf'),
        Buffer.from([0xe9]),
        Buffer.from('\r\nau lait"\r\n3,fine\r\n'),
      ]),
    );

    const { done, failed } = await copySkippingThenFailing(node, dir.path, 'utf8-csv', {
      path: source,
      format: 'csv',
    });
    expect(outcome(done)).toEqual({ state: 'COMPLETED', read: 3, written: 2, bad: 1, error: undefined });
    expect(await readFile(join(dir.path, 'out.jsonl'), 'utf8')).toBe(
      '{"id":"1","name":"ok"}\n{"id":"3","name":"fine"}\n',
    );
    // The bad record is reported at the line its record starts on (line 3, after the header and row 1).
    expect(failed.error.message).toMatch(/at line 3, offset 15: .*not valid UTF-8/);
  });

  it('defect: the CR of a CRLF line break inside a quoted CSV cell was dropped (the cell copied with LF only)', async () => {
    await using dir = await tempDir('ftx-csv-crlf-');
    await using node = await startNodeProcess(localNode('ftx-crlf', dir.path));
    const source = join(dir.path, 'notes.csv');
    // RFC 4180 with CRLF rows; the note's own line breaks are CRLF (as a Windows text box stores them) in row 1 and
    // LF in row 2 — each must come out as it is.
    await writeFile(source, 'id,note\r\n1,"first\r\nsecond ""q"""\r\n2,"only\nLF"\r\n');

    const done = await transfer(
      node,
      'csv-crlf',
      { path: source, format: 'csv' },
      { path: join(dir.path, 'notes.jsonl'), format: 'jsonl' },
    );
    expect(outcome(done)).toEqual({ state: 'COMPLETED', read: 2, written: 2, bad: 0, error: undefined });
    const records = (await readFile(join(dir.path, 'notes.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(records).toEqual([
      { id: '1', note: 'first\r\nsecond "q"' },
      { id: '2', note: 'only\nLF' },
    ]);
  });

  it('defect: a JSONL object naming a key twice was copied with the first value dropped without a word', async () => {
    await using dir = await tempDir('ftx-dup-keys-');
    await using node = await startNodeProcess(localNode('ftx-dup', dir.path));
    const source = join(dir.path, 'dup.jsonl');
    await writeFile(
      source,
      [
        '{"id":1,"a":1,"a":2}',
        '{"id":2,"nested":{"b":1,"b":1}}',
        // Not duplicates: the same name in different objects, a colon inside a string, an escaped name.
        '{"id":3,"a":{"a":{"a":"x:y"}},"list":[{"k":1},{"k":2}],"\\u0061b":1,"ab2":"\\":"}',
        '{"id":4,"__proto__":{"x":1},"constructor":2}',
      ].join('\n'),
    );

    const { done, failed } = await copySkippingThenFailing(node, dir.path, 'dup-keys', {
      path: source,
      format: 'jsonl',
    });
    expect(outcome(done)).toEqual({ state: 'COMPLETED', read: 4, written: 2, bad: 2, error: undefined });
    expect(await readFile(join(dir.path, 'out.jsonl'), 'utf8')).toBe(
      '{"id":3,"a":{"a":{"a":"x:y"}},"list":[{"k":1},{"k":2}],"ab":1,"ab2":"\\":"}\n' +
        '{"id":4,"__proto__":{"x":1},"constructor":2}\n',
    );

    expect(failed.error.message).toMatch(/at line 1, offset 0: .*key "a" twice/);
  });

  it('defect: a JSON number whose whole digits a double cannot hold (12345678901234567.5) or that a double loses to 0 (1e-400) was copied with other digits', async () => {
    await using dir = await tempDir('ftx-numbers-');
    await using node = await startNodeProcess(localNode('ftx-num', dir.path));
    const source = join(dir.path, 'numbers.jsonl');
    await writeFile(
      source,
      [
        '{"id":1,"v":12345678901234567.5}',
        '{"id":2,"v":1e-400}',
        // A fraction whose last digits round, as every JSON reader rounds them (a 17-digit export of a double
        // names that double): copied as the double.
        '{"id":3,"v":0.30000000000000000001,"w":0.10000000000000001}',
        // Held exactly (the value is the same, only the spelling may change): copied.
        '{"id":4,"v":0.1,"w":1.0,"x":1E2,"y":0.30000000000000004,"z":123456789012345.6,"big":9007199254740992}',
      ].join('\n'),
    );

    const { done, failed } = await copySkippingThenFailing(node, dir.path, 'numbers', {
      path: source,
      format: 'jsonl',
    });
    expect(outcome(done)).toEqual({ state: 'COMPLETED', read: 4, written: 2, bad: 2, error: undefined });
    expect(await readFile(join(dir.path, 'out.jsonl'), 'utf8')).toBe(
      '{"id":3,"v":0.3,"w":0.1}\n{"id":4,"v":0.1,"w":1,"x":100,"y":0.30000000000000004,"z":123456789012345.6,"big":9007199254740992}\n',
    );
    expect(failed.error.message).toMatch(
      /at line 1, offset 0: number 12345678901234567\.5 cannot be held exactly/,
    );
  });

  it('defect: a source file written to while a transfer read it had its half-written last row copied as a record', async () => {
    await using dir = await tempDir('ftx-growing-');
    await using node = await startNodeProcess(localNode('ftx-grow', dir.path));
    const source = join(dir.path, 'rows.csv');
    const rows = 200_000;
    const lines = ['id,payload'];
    for (let i = 1; i <= rows; i++) lines.push(`${i},${'p'.repeat(40)}`);
    await writeFile(source, `${lines.join('\n')}\n`);
    const destination = join(dir.path, 'rows.jsonl');

    const submitted = await call(`${node.url}/v1/transfers`, {
      json: {
        id: 'growing',
        source: { type: 'file', path: source, format: 'csv' },
        destination: { type: 'file', path: destination, format: 'jsonl' },
        options: { maxRecordsPerSecond: 20_000 },
      },
    });
    expect(submitted.status).toBe(201);
    await waitFor(
      async () => ((await call(`${node.url}/v1/transfers/growing`)).body?.progress?.recordsRead ?? 0) >= 100,
      { timeoutMs: 30_000, intervalMs: 50, what: 'the transfer to be reading' },
    );
    // A writer appends while the transfer reads: one whole row, then half of the next (its payload still coming).
    await appendFile(source, `${rows + 1},whole\n${rows + 2},half-writ`);

    const done = await finalRecord(node, 'growing');
    // The transfer copies the file as it was when its read began: every row of it once, no half-written row.
    expect(outcome(done)).toEqual({
      state: 'COMPLETED',
      read: rows,
      written: rows,
      bad: 0,
      error: undefined,
    });
    const ids = (await readFile(destination, 'utf8'))
      .trim()
      .split('\n')
      .map((line) => Number((JSON.parse(line) as { id: string }).id));
    expect(ids.length).toBe(rows);
    expect(ids.at(-1)).toBe(rows);
    expect(new Set(ids).size).toBe(rows);
  });
});
