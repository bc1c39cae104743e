/**
 * Another process holding the write lock of the embedded SQLite store (a tool in `BEGIN IMMEDIATE`, a backup): a
 * submit waits a bounded time and answers 503 STORE_UNAVAILABLE, the rest of the node keeps answering meanwhile,
 * and everything works again once the lock goes.
 */
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { tempDir } from '@sluice/testkit';
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

/** The part of a better-sqlite3 connection the test uses. */
interface SqliteConnection {
  exec(sql: string): unknown;
  close(): void;
}

// better-sqlite3 is the store's driver, not a dependency of the app: load the store package's copy.
const Database = createRequire(import.meta.resolve('@sluice/store'))('better-sqlite3') as new (
  file: string,
) => SqliteConnection;

describe('the SQLite store file write-locked by another process', { timeout: 60_000 }, () => {
  it('defect: a held write lock froze the whole app-server (probes included) for every statement that waited on it', async () => {
    await using dir = await tempDir('sluice-store-write-lock-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    const source = await writeRecords(join(dir.path, 'in.jsonl'), 500);
    const destination = join(dir.path, 'out.jsonl');
    const body = fileTransfer('locked-1', source, destination);

    const locker = new Database(join(dir.path, 'node', 'store.db'));
    let released = false;
    try {
      locker.exec('BEGIN IMMEDIATE');
      const settled: string[] = [];
      const submit = call(`${node.url}/v1/transfers`, { json: body }).then((reply) => {
        settled.push('submit');
        return reply;
      });
      // Let the submit reach the store and wait on the lock before the probe is sent.
      await new Promise((r) => setTimeout(r, 500));
      const health = await call(`${node.url}/healthz`);
      settled.push('healthz');
      expect(health.status).toBe(200);
      const refused = await submit;
      // The probe was answered while the submit still waited for the lock, not after it gave up.
      expect(settled).toEqual(['healthz', 'submit']);
      expect(refused.status).toBe(503);
      expect(refused.body.code).toBe('STORE_UNAVAILABLE');
      expect(refused.body.detail).toMatch(/the SQLite store file is locked by another process/);
      locker.exec('ROLLBACK');
      released = true;
    } finally {
      if (!released) locker.exec('ROLLBACK');
      locker.close();
    }

    // The refused submit created nothing; once the lock is gone the resend runs, once.
    expect((await call(`${node.url}/v1/transfers/locked-1`)).status).toBe(404);
    expect((await call(`${node.url}/v1/transfers`, { json: body })).status).toBe(201);
    const done = await waitForState(node.url, 'locked-1', 'COMPLETED');
    expect(done.result.recordsWritten).toBe(500);
    expect(await exactlyOnce(destination, 500)).toBeNull();
    expect((await call(`${node.url}/v1/transfers`, { json: body })).status).toBe(200);
  });
  it('defect: reading a transfer while the lock was held waited behind the statements waiting for it', async () => {
    await using dir = await tempDir('sluice-store-write-lock-read-');
    await using node = await startNodeProcess(localNode('solo', dir.path));
    const source = await writeRecords(join(dir.path, 'in.jsonl'), 100);
    const done = fileTransfer('done-1', source, join(dir.path, 'done.jsonl'));
    expect((await call(`${node.url}/v1/transfers`, { json: done })).status).toBe(201);
    await waitForState(node.url, 'done-1', 'COMPLETED');

    const locker = new Database(join(dir.path, 'node', 'store.db'));
    try {
      locker.exec('BEGIN IMMEDIATE');
      const settled: string[] = [];
      const submit = call(`${node.url}/v1/transfers`, {
        json: fileTransfer('locked-2', source, join(dir.path, 'locked.jsonl')),
      }).then((reply) => {
        settled.push('submit');
        return reply;
      });
      // Let the submit reach the store and wait on the lock before the read is sent.
      await new Promise((r) => setTimeout(r, 500));
      // WAL: a reader never waits for the writer, so the stored outcome is read while the lock is held.
      const read = await call(`${node.url}/v1/transfers/done-1`);
      settled.push('read');
      expect(read.status).toBe(200);
      expect(read.body).toMatchObject({ state: 'COMPLETED', result: { recordsWritten: 100 } });
      const listed = await call(`${node.url}/v1/transfers?state=COMPLETED`);
      settled.push('list');
      expect(listed.body.records.map((r: { id: string }) => r.id)).toEqual(['done-1']);
      expect((await submit).body.code).toBe('STORE_UNAVAILABLE');
      expect(settled).toEqual(['read', 'list', 'submit']);
    } finally {
      locker.exec('ROLLBACK');
      locker.close();
    }
  });
});
