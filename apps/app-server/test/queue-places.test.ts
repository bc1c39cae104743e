/**
 * A node's transfer queue is bounded (`transfers.queueSize`, then 429 QUEUE_FULL). A queued transfer that stops
 * before it ever runs — terminated by a client, taken over by another node — must give its place back at once:
 * otherwise the node refuses new work (and the sweeper leaves orphans alone) while nothing is waiting, until a
 * slot frees up and the dead entries are walked past — never, behind transfers that follow their source.
 */
import { join } from 'node:path';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, fileTransfer, localNode, startNodeProcess, writeRecords } from './helpers.js';

/** `sluice_transfers{state="…"}` of the node's metrics. */
async function transfersGauge(url: string, state: 'running' | 'queued'): Promise<number> {
  const text = (await call(`${url}/metrics`)).body as string;
  const line = text.split('\n').find((l) => l.startsWith(`sluice_transfers{state="${state}"}`));
  return Number(line?.split(' ')[1]);
}

describe('queue places', { timeout: 90_000 }, () => {
  it('defect: terminated queued transfers kept their queue places: the node answered 429 QUEUE_FULL with nothing waiting', async () => {
    await using dir = await tempDir('sluice-queue-places-');
    await using node = await startNodeProcess({
      ...localNode('solo', dir.path),
      transfers: { maxConcurrentTransfers: 1, queueSize: 3 },
    });
    // 200 records at 10 a second: the one running transfer holds the only slot for the whole test.
    const source = await writeRecords(join(dir.path, 'in', 'slow.jsonl'), 200);
    const submit = (id: string) =>
      call(`${node.url}/v1/transfers`, {
        json: fileTransfer(id, source, join(dir.path, 'out', `${id}.jsonl`), 10),
      });
    const created = [];
    for (const id of ['running', 'queued-1', 'queued-2', 'queued-3']) created.push((await submit(id)).status);
    expect(created).toEqual([201, 201, 201, 201]);
    expect((await submit('refused')).status).toBe(429);
    expect(await transfersGauge(node.url, 'queued')).toBe(3);

    for (const id of ['queued-1', 'queued-2', 'queued-3']) {
      const terminated = await call(`${node.url}/v1/transfers/${id}/terminate`, { method: 'POST' });
      expect(terminated.status).toBe(200);
      expect(terminated.body.state).toBe('TERMINATED');
    }

    // Nothing waits any more: the queue's places are free again, while the first transfer still runs.
    expect(await transfersGauge(node.url, 'queued')).toBe(0);
    const after = [];
    for (const id of ['after-1', 'after-2', 'after-3']) {
      const reply = await submit(id);
      after.push(reply.status === 201 ? 201 : `${reply.status} ${reply.body?.code}`);
    }
    expect(after).toEqual([201, 201, 201]);
    expect(await transfersGauge(node.url, 'queued')).toBe(3);
    expect((await call(`${node.url}/v1/transfers/running`)).body.state).toBe('IN_PROGRESS');
    expect(await transfersGauge(node.url, 'running')).toBe(1);
  });
});
