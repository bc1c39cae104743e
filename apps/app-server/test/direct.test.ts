/**
 * Two real app-servers on PostgreSQL without NATS: the direct-address backplane asks the owner's advertised
 * URL (its internal routes, behind the same bearer auth) who runs a transfer and routes terminations to it.
 */
import { mkdir, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { createTestDatabase, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, exactlyOnce, fileTransfer, startNodeProcess, writeRecords } from './helpers.js';

const TOKEN = 'direct-test-token-0123456789abcdef';
const auth = { authorization: `Bearer ${TOKEN}` };

describe('direct-address backplane (PostgreSQL, no NATS)', () => {
  it('reports the owner, routes terminate to it, and takes over from a killed owner', async () => {
    await using db = await createTestDatabase('sluice_app_direct');
    await using dir = await tempDir('sluice-app-direct-');
    const spec = (nodeId: string) => ({
      nodeId,
      dir: join(dir.path, nodeId),
      store: db.url,
      roots: [dir.path],
      extraYaml: `control: { auth: { tokens: ["${TOKEN}"] } }`,
    });
    const [d1, d2] = await Promise.all([startNodeProcess(spec('d1')), startNodeProcess(spec('d2'))]);
    try {
      const ready = await call(`${d2.url}/readyz`);
      expect(ready.body.backplaneKind).toBe('direct');
      const source = await writeRecords(join(dir.path, 'in.jsonl'), 3_000);
      const running = fileTransfer('direct-1', source, join(dir.path, 'out-1.jsonl'), 600);
      expect((await call(`${d1.url}/v1/transfers`, { json: running, headers: auth })).status).toBe(201);
      const owner = await call(`${d2.url}/v1/transfers`, { json: running, headers: auth });
      expect(owner.status).toBe(202);
      expect(owner.body).toMatchObject({ resumed: false, owner: { nodeId: 'd1', address: d1.url } });
      // The internal route is behind auth too.
      expect((await call(`${d1.url}/v1/internal/transfers/direct-1/owner`)).status).toBe(401);
      const report = await call(`${d1.url}/v1/internal/transfers/direct-1/owner`, { headers: auth });
      expect(report.body).toMatchObject({ nodeId: 'd1', epoch: 1 });

      const terminated = await call(`${d2.url}/v1/transfers/direct-1/terminate`, {
        method: 'POST',
        headers: auth,
      });
      expect(terminated.status).toBe(200);
      // Routed to the owner, which stopped and recorded it itself: still its epoch, still its name (a local
      // takeover by d2 would say epoch 2, owner d2).
      expect(terminated.body).toMatchObject({ state: 'TERMINATED', epoch: 1, owner: { nodeId: 'd1' } });
      await d1.child.waitForLine(/transfer terminated/, 5_000);
      // Nothing resumes a terminated transfer: the temp file it was writing is gone.
      await waitFor(async () => !(await readdir(dir.path)).some((f) => f.startsWith('.out-1.jsonl.')), {
        timeoutMs: 5_000,
        what: 'the terminated transfer to remove its temp file',
      });
      // A transfer that fails (its source is a directory: SOURCE_FAILED) leaves no temp file either.
      await mkdir(join(dir.path, 'not-a-file'));
      const failing = fileTransfer('direct-3', join(dir.path, 'not-a-file'), join(dir.path, 'out-3.jsonl'));
      expect((await call(`${d1.url}/v1/transfers`, { json: failing, headers: auth })).status).toBe(201);
      const failed = await waitFor(
        async () => {
          const reply = await call(`${d1.url}/v1/transfers/direct-3`, { headers: auth });
          return reply.body.state === 'FAILED' ? reply.body : null;
        },
        { timeoutMs: 15_000, what: 'direct-3 to fail' },
      );
      expect(failed.error).toMatchObject({ code: 'SOURCE_FAILED' });
      // Removed once the failure is recorded (the record turns FAILED first: a fenced write decides it is final).
      await waitFor(async () => !(await readdir(dir.path)).some((f) => f.startsWith('.out-3.jsonl.')), {
        timeoutMs: 5_000,
        what: 'the failed transfer to remove its temp file',
      });
      // Terminating again is a no-op.
      const again = await call(`${d1.url}/v1/transfers/direct-1/terminate`, {
        method: 'POST',
        headers: auth,
      });
      expect(again.status).toBe(200);
      expect(again.body.state).toBe('TERMINATED');

      const killed = fileTransfer('direct-2', source, join(dir.path, 'out-2.jsonl'), 1_000);
      expect((await call(`${d1.url}/v1/transfers`, { json: killed, headers: auth })).status).toBe(201);
      await waitFor(
        async () => {
          const reply = await call(`${d1.url}/v1/internal/transfers/direct-2/owner`, { headers: auth });
          return reply.status === 200 && (reply.body.progress?.recordsWritten ?? 0) > 100;
        },
        { timeoutMs: 15_000, what: 'direct-2 to make progress' },
      );
      await d1.child.stop('SIGKILL');
      const takeover = await call(`${d2.url}/v1/transfers`, { json: killed, headers: auth });
      expect(takeover.status).toBe(202);
      expect(takeover.body).toMatchObject({ resumed: true, owner: { nodeId: 'd2' }, epoch: 2 });
      const done = await waitFor(
        async () => {
          const reply = await call(`${d2.url}/v1/transfers/direct-2`, { headers: auth });
          return reply.body.state === 'COMPLETED' ? reply.body : null;
        },
        { timeoutMs: 30_000, what: 'direct-2 to complete' },
      );
      expect(done.attempts).toBe(2);
      expect(await exactlyOnce(join(dir.path, 'out-2.jsonl'), 3_000)).toBeNull();
      // A finished transfer cannot be terminated: 409, and the record keeps its outcome.
      const late = await call(`${d2.url}/v1/transfers/direct-2/terminate`, { method: 'POST', headers: auth });
      expect(late.status).toBe(409);
      expect(late.body).toMatchObject({ code: 'ILLEGAL_TRANSITION', status: 409 });
      const after = await call(`${d2.url}/v1/transfers/direct-2`, { headers: auth });
      expect(after.body.state).toBe('COMPLETED');
    } finally {
      await Promise.allSettled([d1.child.stop('SIGKILL'), d2.child.stop('SIGKILL')]);
    }
  }, 90_000);
});
