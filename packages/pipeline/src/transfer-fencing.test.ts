import { readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TransferRequest } from '@sluice/core';
import { spawnTs, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { fencedFileCheckpointPort } from '../test/helpers.js';
import { runTransfer } from './transfer.js';

const CHILD = fileURLToPath(new URL('../test/fixtures/transfer-child.ts', import.meta.url));
const RECORDS = 6_000;

const request = (source: string, destination: string, maxRecordsPerSecond?: number): TransferRequest => ({
  id: 'fenced',
  mode: 'idempotent',
  source: { type: 'file', path: source, format: 'jsonl' },
  destination: { type: 'file', path: destination, format: 'jsonl' },
  properties: {},
  options: { onBadRecord: 'skip', ...(maxRecordsPerSecond ? { maxRecordsPerSecond } : {}) },
});

const readIds = async (path: string) =>
  (await readFile(path, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map((line) => (JSON.parse(line) as { id: number }).id);

describe('a stale transfer owner (frozen past its lease, then resumed) cannot touch the output', () => {
  it('SIGSTOPped owner, taken over and completed by another, fails with STALE_EPOCH after SIGCONT and changes nothing', {
    timeout: 120_000,
  }, async () => {
    await using data = await tempDir();
    await using state = await tempDir();
    const src = join(data.path, 'in.jsonl');
    const out = join(data.path, 'out.jsonl');
    const checkpointFile = join(state.path, 'checkpoint.json');
    const ownerFile = join(state.path, 'owner');
    await writeFile(
      src,
      Array.from({ length: RECORDS }, (_, i) => `${JSON.stringify({ id: i, name: `n${i}` })}\n`).join(''),
    );
    await writeFile(ownerFile, 'A');

    // Owner A: throttled so it is mid-transfer when frozen.
    await using stale = spawnTs(CHILD, [
      JSON.stringify({
        request: request(src, out, 3_000),
        checkpointFile,
        ownerFile,
        owner: 'A',
        commitEveryRecords: 500,
        fileChunkBytes: 4096,
      }),
    ]);
    await waitFor(() => stale.lines.filter((l) => l.startsWith('COMMIT ')).length >= 2, {
      timeoutMs: 60_000,
      intervalMs: 2,
      what: 'two commits of the first owner',
    });
    stale.kill('SIGSTOP');
    try {
      // Its lease ran out: owner B takes the transfer over, resumes from A's checkpoint and completes it.
      await writeFile(ownerFile, 'B');
      const decisions: string[] = [];
      const result = await runTransfer(request(src, out), {
        checkpoint: fencedFileCheckpointPort(checkpointFile, ownerFile, 'B', 'fenced', 2),
        connections: {},
        signal: new AbortController().signal,
        commitEveryRecords: 500,
        fileChunkBytes: 4096,
        onDecision: (plan) => decisions.push(plan.decision),
      });
      expect(decisions).toEqual(['resume']);
      expect(result.recordsWritten).toBe(RECORDS);
    } finally {
      stale.kill('SIGCONT');
    }
    const published = await readFile(out);
    const before = await stat(out);
    expect(await readIds(out)).toEqual(Array.from({ length: RECORDS }, (_, i) => i));

    // A wakes up mid-epoch: it may read and stage more records, but it never publishes anything.
    const failed = await stale.waitForLine(/^(DONE|FAILED) /, 60_000);
    expect(failed).toMatch(/^FAILED (STALE_EPOCH|TRANSFER_TERMINATED)/);
    const after = await stat(out);
    expect(after.mtimeMs).toBe(before.mtimeMs);
    expect(after.ino).toBe(before.ino);
    expect((await readFile(out)).equals(published)).toBe(true);
    // No temp file of either owner is left next to the destination.
    expect((await readdir(data.path)).sort()).toEqual(['in.jsonl', 'out.jsonl']);
  });
});
