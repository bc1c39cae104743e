/**
 * One node of a long-running deployment completes transfer after transfer: 300 small file transfers submitted and
 * completed, five at a time. What a finished transfer held (its source and destination files, its run, its
 * connections) is given back — the descriptor count stays flat — and its stored row goes once it is older than
 * `retention.transferDays`, whatever fraction of a day that is.
 */
import { join } from 'node:path';
import { processResources, sleep, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, fileTransfer, localNode, startNodeProcess, waitForState, writeRecords } from './helpers.js';

async function completeTransfers(url: string, dir: string, source: string, ids: string[]): Promise<void> {
  const queue = [...ids];
  await Promise.all(
    Array.from({ length: 5 }, async () => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        const created = await call(`${url}/v1/transfers`, {
          json: fileTransfer(id, source, join(dir, 'out', `${id}.jsonl`)),
        });
        expect(created.status).toBe(201);
        await waitForState(url, id, 'COMPLETED');
      }
    }),
  );
}

const ids = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => `t-${from + i}`);

describe('transfer churn on one node', () => {
  it('300 completed transfers leave the descriptor count flat', async () => {
    await using dir = await tempDir('sluice-transfer-churn-');
    const source = await writeRecords(join(dir.path, 'in.jsonl'), 5);
    await using node = await startNodeProcess(localNode('solo', dir.path));
    await completeTransfers(node.url, dir.path, source, ids(0, 50));
    const warm = processResources(node.child.pid).fds;
    await completeTransfers(node.url, dir.path, source, ids(50, 300));
    // One descriptor kept per transfer would add 250.
    expect(processResources(node.child.pid).fds, `fds after 50 transfers: ${warm}`).toBeLessThanOrEqual(
      warm + 5,
    );
    const listed = await call(`${node.url}/v1/transfers?state=COMPLETED&limit=500`);
    expect(listed.status).toBe(200);
    expect(listed.body.records).toHaveLength(300);
  }, 90_000);

  it('defect: a fractional retention.transferDays (0.00001, 1.1, 0.7) was accepted but every purge failed, so finished rows were never removed', async () => {
    await using dir = await tempDir('sluice-transfer-retention-');
    const source = await writeRecords(join(dir.path, 'in.jsonl'), 5);
    const spec = localNode('solo', dir.path);
    {
      await using node = await startNodeProcess(spec);
      await completeTransfers(node.url, dir.path, source, ids(0, 20));
    }
    // 0.00001 days is 864 ms, and like 1.1 or 0.7 days not a whole number of ms in binary floating point.
    await sleep(1_500);
    await using node = await startNodeProcess({ ...spec, extraYaml: 'retention: { transferDays: 0.00001 }' });
    // Finished rows are purged at start-up (then hourly).
    await waitFor(
      async () => {
        const listed = await call(`${node.url}/v1/transfers?limit=500`);
        return listed.status === 200 && listed.body.records.length === 0;
      },
      { timeoutMs: 10_000, what: 'the finished transfers purged' },
    );
    expect(node.child.lines.filter((line) => line.includes('purging finished transfers failed'))).toEqual([]);
    // A purged id is a new request again: resent, it runs once more.
    await completeTransfers(node.url, dir.path, source, ['t-0']);
    expect((await call(`${node.url}/v1/transfers/t-0`)).body).toMatchObject({
      state: 'COMPLETED',
      attempts: 1,
    });
  }, 90_000);
});
