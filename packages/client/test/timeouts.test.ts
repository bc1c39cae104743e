/**
 * A server that accepts connections but never answers — stopped (SIGSTOP), a frozen VM, a lost path — must not hold
 * a caller forever: every request has a deadline (`timeoutMs`), `wait` keeps its own, and a request that timed out is
 * resent only when resending is safe (an idempotent transfer: same id and body, its stored answer).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, sleep, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { createClient, SluiceClientError } from '../src/index.js';
import { item, startApi, startApp, startWriter, waitUntil } from './servers.js';

/** What a promise settled with, or `stillWaiting` when it had not settled after `ms` (a hang, not a slow answer). */
async function outcome(promise: Promise<unknown>, ms = 20_000): Promise<unknown> {
  return Promise.race([
    promise.then(
      (value) => ({ value }),
      (err: unknown) => err,
    ),
    sleep(ms).then(() => 'stillWaiting'),
  ]);
}

describe('requests against a server that never answers', () => {
  it('defect: transfers.wait({ timeoutMs }) and every other request hung while the app-server was stopped (SIGSTOP) — now TIMEOUT, and only an idempotent submit is resent', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const input = join(dir.path, 'in.jsonl');
    await writeFile(input, `${[1, 2, 3].map((id) => JSON.stringify(item(id))).join('\n')}\n`);
    const request = (id: string, extra: Record<string, unknown> = {}) => ({
      id,
      source: { type: 'file' as const, path: input, format: 'jsonl' as const },
      destination: { type: 'file' as const, path: join(dir.path, `${id}.jsonl`), format: 'jsonl' as const },
      ...extra,
    });
    await using app = await startApp(dir.path, { port: await freePort() });
    const client = createClient({ controlUrl: app.url, timeoutMs: 500 });
    await client.transfers.submit(request('t-before'));
    expect((await client.transfers.wait('t-before', { timeoutMs: 30_000 })).state).toBe('COMPLETED');

    app.child.kill('SIGSTOP');
    try {
      // The process accepts connections (the kernel does) but answers none.
      const waited = await outcome(client.transfers.wait('t-before', { timeoutMs: 1_000, intervalMs: 100 }));
      expect(waited).toBeInstanceOf(SluiceClientError);
      expect(waited).toMatchObject({
        code: 'TIMEOUT',
        status: 0,
        message: 'Transfer "t-before" did not finish in time',
      });
      const got = await outcome(client.transfers.get('t-before'));
      expect(got).toMatchObject({
        code: 'TIMEOUT',
        message: `GET ${app.url}/v1/transfers/t-before: no answer within 500 ms (timeoutMs)`,
      });

      // Fire-and-forget: the server may have taken the request before it stopped answering; never resent.
      const fireRetries: string[] = [];
      const fired = await outcome(
        client.transfers.submit(request('t-fire', { mode: 'fire-and-forget' }), {
          onRetry: (error) => fireRetries.push(error.code),
        }),
      );
      expect(fired).toMatchObject({ code: 'TIMEOUT' });
      expect(fireRetries).toEqual([]);

      // Idempotent: resent after each timeout (same id and body) until the server answers.
      const retries: string[] = [];
      const submitted = client.transfers.submit(request('t-idem'), {
        retries: 200,
        initialDelayMs: 50,
        maxDelayMs: 200,
        onRetry: (error) => retries.push(error.code),
      });
      await waitUntil(() => retries.length >= 2, 'two timed-out attempts');
      expect(new Set(retries)).toEqual(new Set(['TIMEOUT']));
      app.child.kill('SIGCONT');
      // The server now reads every attempt it had queued: the first creates the transfer, the others get it.
      expect([200, 201, 202]).toContain((await submitted).status);
    } finally {
      app.child.kill('SIGCONT');
    }
    const done = await client.transfers.wait('t-idem', { timeoutMs: 30_000 });
    expect(done).toMatchObject({
      state: 'COMPLETED',
      attempts: 1,
      result: { recordsRead: 3, recordsWritten: 3 },
    });
    const written = (await readFile(join(dir.path, 't-idem.jsonl'), 'utf8')).trim().split('\n');
    expect(written.map((line) => JSON.parse(line).id)).toEqual([1, 2, 3]);
    const listed = await client.transfers.list({ limit: 100 });
    expect(listed.records.filter((t) => t.id === 't-idem')).toHaveLength(1);
  });

  it('a read of a stopped api-server ends with TIMEOUT; a timeout of 0 waits for the answer', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(join(dir.path, 'data'), [item(1)]);
    await using api = await startApi(dir.path, writer.root);
    const items = createClient({ queryUrl: api.url, timeoutMs: 300 }).endpoint<{ id: number }>('items');
    expect(await items.get(1)).toEqual(item(1));
    api.child.kill('SIGSTOP');
    let unlimited: Promise<unknown> | undefined;
    try {
      expect(await outcome(items.get(1))).toMatchObject({ code: 'TIMEOUT', status: 0 });
      expect(await outcome(items.count())).toMatchObject({ code: 'TIMEOUT' });
      unlimited = createClient({ queryUrl: api.url, timeoutMs: 0 }).endpoint('items').get(1);
      // Still waiting well past the other client's deadline; answered once the server runs again.
      expect(await outcome(unlimited, 1_500)).toBe('stillWaiting');
    } finally {
      api.child.kill('SIGCONT');
    }
    expect(await unlimited).toEqual(item(1));
  });
});
