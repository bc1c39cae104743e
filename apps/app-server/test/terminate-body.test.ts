/**
 * `POST /v1/transfers/:id/terminate` takes no body, as the steering routes take none: a body that says something
 * (`{"reason": …}`, `{"force": true}`) is refused with 400 VALIDATION_FAILED at its key and stops nothing, rather than
 * terminating the transfer as if it had been read.
 */
import { join } from 'node:path';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, fileTransfer, localNode, startNodeProcess, waitForState, writeRecords } from './helpers.js';

describe('the body of terminate', { timeout: 90_000 }, () => {
  it('defect: terminate with a body it does not take ({"reason": …}, {"force": true}) terminated the transfer (200) and ignored the body', async () => {
    await using dir = await tempDir('sluice-terminate-body-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    const source = await writeRecords(join(dir.path, 'data', 'in.jsonl'), 2_000);
    const submitted = await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('long-one', source, join(dir.path, 'out', 'out.jsonl'), 50),
    });
    expect(submitted.status).toBe(201);

    const answers: Record<string, string> = {};
    for (const body of [{ reason: 'cleanup' }, { force: true }]) {
      const reply = await call(`${node.url}/v1/transfers/long-one/terminate`, { json: body });
      const paths = (reply.body?.errors ?? []).map((e: { path: string }) => e.path).join(',');
      answers[JSON.stringify(body)] = `${reply.status} ${reply.body?.code ?? reply.body?.state} ${paths}`;
    }
    expect(answers).toEqual({
      '{"reason":"cleanup"}': '400 VALIDATION_FAILED reason',
      '{"force":true}': '400 VALIDATION_FAILED force',
    });
    // Refused bodies stopped nothing: the transfer still runs.
    expect((await call(`${node.url}/v1/transfers/long-one`)).body.state).toBe('IN_PROGRESS');

    // No body, or an empty object, terminates it.
    const terminated = await call(`${node.url}/v1/transfers/long-one/terminate`, { json: {} });
    expect(terminated.status).toBe(200);
    expect(terminated.body.state).toBe('TERMINATED');
    const again = await call(`${node.url}/v1/transfers/long-one/terminate`, { method: 'POST' });
    expect({ status: again.status, state: again.body.state }).toEqual({ status: 200, state: 'TERMINATED' });
    await waitForState(node.url, 'long-one', 'TERMINATED');
  });
});
