/**
 * A fire-and-forget request is not recorded, so nothing stops a client from sending one with the id of an
 * idempotent transfer (the same request with `mode` changed — another body, which the store never sees) while that
 * transfer runs. Each run's effects in the destination must stay its own: a fire-and-forget run's staged files,
 * checkpoints and dedupe ids may not be those of the recorded transfer, or one run's clean-up removes what the other
 * is writing.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  exactlyOnce,
  fileTransfer,
  localNode,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

const RECORDS = 2_000;

/** The names of the temp files staged in `directory` (a file sink's `….partial`). */
async function stagedFiles(directory: string): Promise<string[]> {
  return (await readdir(directory).catch(() => [] as string[])).filter((name) => name.endsWith('.partial'));
}

describe('fire-and-forget runs beside a recorded transfer with the same id', { timeout: 90_000 }, () => {
  it('defect: a fire-and-forget run with a running transfer’s id removed that transfer’s staged file: the transfer FAILED (SINK_FAILED, ENOENT at publish)', async () => {
    await using dir = await tempDir('sluice-ff-writer-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    const source = await writeRecords(join(dir.path, 'in', 'records.jsonl'), RECORDS);
    const out = join(dir.path, 'out');
    const destination = join(out, 'copy.jsonl');
    // 2 000 records at 400 a second: the recorded run is still staging when the fire-and-forget one has finished.
    const recorded = fileTransfer('shared-id', source, destination, 400);
    expect((await call(`${node.url}/v1/transfers`, { json: recorded })).status).toBe(201);
    await waitFor(async () => (await stagedFiles(out)).length === 1, {
      timeoutMs: 10_000,
      what: 'the recorded transfer to stage its temp file',
    });

    const fired = await call(`${node.url}/v1/transfers`, {
      json: { ...fileTransfer('shared-id', source, destination), mode: 'fire-and-forget' },
    });
    expect(fired.status).toBe(202);
    // The fire-and-forget run publishes its own whole copy, then cleans up after itself.
    await waitFor(async () => (await exactlyOnce(destination, RECORDS).catch(() => 'absent')) === null, {
      timeoutMs: 20_000,
      what: 'the fire-and-forget run to publish its copy',
    });

    const finished = await waitFor(
      async () => {
        const reply = await call(`${node.url}/v1/transfers/shared-id`);
        return reply.body.state === 'IN_PROGRESS' ? null : reply.body;
      },
      { timeoutMs: 30_000, intervalMs: 100, what: 'the recorded transfer to end' },
    );
    expect({ state: finished.state, error: finished.error }).toEqual({ state: 'COMPLETED', error: null });
    expect(finished.result).toMatchObject({ recordsRead: RECORDS, recordsWritten: RECORDS });
    expect(finished.attempts).toBe(1);
    expect(await exactlyOnce(destination, RECORDS)).toBeNull();
    expect(await stagedFiles(out)).toEqual([]);
  });

  it('defect: terminating a transfer removed the staged file of a fire-and-forget run with its id: that run never published', async () => {
    await using dir = await tempDir('sluice-ff-writer-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    const source = await writeRecords(join(dir.path, 'in', 'records.jsonl'), RECORDS);
    const out = join(dir.path, 'out');
    const destination = join(out, 'copy.jsonl');
    const fired = await call(`${node.url}/v1/transfers`, {
      json: { ...fileTransfer('shared-id', source, destination, 400), mode: 'fire-and-forget' },
    });
    expect(fired.status).toBe(202);
    await waitFor(async () => (await stagedFiles(out)).length === 1, {
      timeoutMs: 10_000,
      what: 'the fire-and-forget run to stage its temp file',
    });

    const recorded = fileTransfer('shared-id', source, destination, 10);
    expect((await call(`${node.url}/v1/transfers`, { json: recorded })).status).toBe(201);
    await waitFor(async () => (await stagedFiles(out)).length === 2, {
      timeoutMs: 10_000,
      what: 'the recorded transfer to stage its own temp file',
    });
    const terminated = await call(`${node.url}/v1/transfers/shared-id/terminate`, { method: 'POST' });
    expect(terminated.status).toBe(200);
    expect(terminated.body.state).toBe('TERMINATED');
    await waitForState(node.url, 'shared-id', 'TERMINATED');

    // The fire-and-forget run was not terminated (nothing records it): it publishes its whole copy, and what each
    // run staged is gone once both ended.
    await waitFor(async () => (await exactlyOnce(destination, RECORDS).catch(() => 'absent')) === null, {
      timeoutMs: 30_000,
      what: 'the fire-and-forget run to publish its copy',
    });
    await waitFor(async () => (await stagedFiles(out)).length === 0, {
      timeoutMs: 10_000,
      what: 'no staged file left',
    });
    expect(node.child.output()).not.toContain('fire-and-forget transfer did not complete');
  });
});
