/**
 * A source file cut short while a transfer reads it (truncated in place — a log rotation with `copytruncate`, an
 * export rewritten by `>`) has lost records the transfer had not read yet: the transfer cannot copy the file, so it
 * fails saying why, and publishes nothing — it must not complete with the records it happened to read first.
 */
import { existsSync } from 'node:fs';
import { truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, fileTransfer, localNode, startNodeProcess, writeRecords } from './helpers.js';

describe('a source file truncated while it is read', { timeout: 120_000 }, () => {
  it('defect: a file transfer whose source was truncated mid-read was COMPLETED with the records read before the cut, the cut line counted as a bad record, and the partial copy published', async () => {
    await using dir = await tempDir('sluice-source-truncated-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    // ~9 MB: far more than the source reads ahead, so most of it is unread when it is cut.
    const source = await writeRecords(join(dir.path, 'data', 'orders.jsonl'), 200_000);
    const destination = join(dir.path, 'out', 'orders.jsonl');
    const submitted = await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('cut-short', source, destination, 2_000),
    });
    expect(submitted.status).toBe(201);
    await waitFor(
      async () => {
        const reply = await call(`${node.url}/v1/transfers/cut-short`);
        return (reply.body?.progress?.recordsRead ?? 0) >= 100;
      },
      { timeoutMs: 30_000, intervalMs: 50, what: 'the transfer to be reading' },
    );
    await truncate(source, 1_000);

    const final = await waitFor(
      async () => {
        const reply = await call(`${node.url}/v1/transfers/cut-short`);
        return ['COMPLETED', 'FAILED', 'TERMINATED'].includes(reply.body?.state) ? reply.body : null;
      },
      { timeoutMs: 60_000, intervalMs: 100, what: 'the transfer to end' },
    );
    expect({ state: final.state, code: final.error?.code, result: final.result }).toEqual({
      state: 'FAILED',
      code: 'SOURCE_FAILED',
      result: null,
    });
    expect(final.error.message).toMatch(/shrank while it was read/);
    // Nothing published: no partial copy where the whole file was asked for.
    expect(existsSync(destination)).toBe(false);
  });
});
