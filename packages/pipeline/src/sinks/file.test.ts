import { access, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CheckpointPort, TransferRequest } from '@sluice/core';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { fileCheckpointPort } from '../../test/helpers.js';
import { runTransfer } from '../transfer.js';

const RECORDS = 1_000;

/**
 * A port whose save matching `when` (the `nth` save, or the first one that holds every record) lands and then
 * waits for `release`: an owner frozen right after a checkpoint.
 */
function pausedAfterSave(port: CheckpointPort, when: number | 'all-written') {
  let saves = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const state = { paused: false, release };
  const save = port.save.bind(port);
  port.save = async (checkpoint: unknown) => {
    await save(checkpoint);
    saves++;
    const written = (checkpoint as { positions: Record<string, { written?: number }> }).positions[
      'fenced-file.sink'
    ]?.written;
    if (!state.paused && (when === 'all-written' ? written === RECORDS : saves === when)) {
      state.paused = true;
      await gate;
    }
  };
  return state;
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

describe('file sink effects are fenced by the epoch', () => {
  it('a stale owner resumed after a takeover neither publishes nor deletes the new owner’s temp (STALE_EPOCH)', {
    timeout: 30_000,
  }, async () => {
    await using dir = await tempDir();
    const src = join(dir.path, 'in.jsonl');
    const out = join(dir.path, 'out.jsonl');
    const checkpointFile = join(dir.path, 'checkpoint.json');
    await writeFile(
      src,
      Array.from({ length: RECORDS }, (_, i) => `${JSON.stringify({ id: i })}\n`).join(''),
    );
    const request: TransferRequest = {
      id: 'fenced-file',
      mode: 'idempotent',
      source: { type: 'file', path: src, format: 'jsonl' },
      destination: { type: 'file', path: out, format: 'jsonl' },
      properties: {},
      options: { onBadRecord: 'skip' },
    };
    const run = (port: CheckpointPort) =>
      runTransfer(request, {
        checkpoint: port,
        connections: {},
        signal: new AbortController().signal,
        commitEveryRecords: 300,
        fileChunkBytes: 2048,
      });

    // Epoch 1 saves its last checkpoint, then freezes before it publishes.
    const stalePort = fileCheckpointPort(checkpointFile, { epoch: 1, transferId: request.id });
    const stale = pausedAfterSave(stalePort, 'all-written');
    const staleRun = run(stalePort).then(
      () => 'DONE',
      (err: { code?: string }) => err.code ?? String(err),
    );
    await waitFor(() => stale.paused, {
      timeoutMs: 10_000,
      what: 'the epoch-1 run frozen after its last save',
    });

    // Epoch 2 takes over, resumes into its own temp, and freezes before publishing too.
    const ownerPort = fileCheckpointPort(checkpointFile, { epoch: 2, transferId: request.id });
    const owner = pausedAfterSave(ownerPort, 1);
    const ownerRun = run(ownerPort);
    await waitFor(() => owner.paused, {
      timeoutMs: 10_000,
      what: 'the epoch-2 run frozen before publishing',
    });
    const ownerTemps = (await readdir(dir.path)).filter((n) => n.includes('.e2.'));
    expect(ownerTemps).toHaveLength(1);

    // The stale owner wakes up: its finishing step is refused; nothing is published, the new temp survives.
    stale.release();
    expect(await staleRun).toBe('STALE_EPOCH');
    expect(await exists(out)).toBe(false);
    expect(await exists(join(dir.path, ownerTemps[0]!))).toBe(true);

    owner.release();
    const result = await ownerRun;
    expect(result.decision).toBe('resume');
    expect(
      (await readFile(out, 'utf8'))
        .trim()
        .split('\n')
        .map((l) => (JSON.parse(l) as { id: number }).id),
    ).toEqual(Array.from({ length: RECORDS }, (_, i) => i));
    // The new owner removed the older epoch's temp; nothing else is left.
    expect((await readdir(dir.path)).sort()).toEqual(['checkpoint.json', 'in.jsonl', 'out.jsonl']);
  });
});
