/**
 * Files under the allowed roots that the app-server's user may not read or write (EACCES / EPERM): refused at
 * submit with `403 PATH_NOT_ACCESSIBLE` when that can be seen there, a FAILED transfer with the same code when it
 * shows only at run time — never `500 INTERNAL`, never a partial file left behind.
 *
 * Root passes every permission check, so the app-server runs as root without the capabilities that bypass them
 * (`setpriv --bounding-set`): the files' own modes decide, as for any service user.
 */
import { spawnSync } from 'node:child_process';
import { chmod, chown, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir, waitFor } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  call,
  fileTransfer,
  type NodeProcess,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

const NOBODY = { uid: 65534, gid: 65534 };
/** Only root can drop root's file capabilities, and only root makes the point (chmod does not stop root). */
const canDropCapabilities = process.getuid?.() === 0 && spawnSync('setpriv', ['--version']).status === 0;

let dir: Awaited<ReturnType<typeof tempDir>>;
let node: NodeProcess;
let inDir: string;
let outDir: string;

beforeAll(async () => {
  // Fails loudly rather than skipping: without them nothing here would be shown.
  if (!canDropCapabilities)
    throw new Error(
      "these tests drop root's file capabilities from the app-server: they need root and setpriv (util-linux)",
    );
  dir = await tempDir('sluice-app-permissions-');
  await chmod(dir.path, 0o755);
  inDir = join(dir.path, 'in');
  outDir = join(dir.path, 'out');
  await writeRecords(join(inDir, 'ok.jsonl'), 20);
  await writeRecords(join(inDir, 'secret.jsonl'), 20);
  await writeRecords(join(inDir, 'later.jsonl'), 20);
  await writeRecords(join(inDir, 'locked', 'x.jsonl'), 20);
  await writeRecords(join(dir.path, 'private', 'x.jsonl'), 20);
  await mkdir(join(outDir, 'ro'), { recursive: true });
  await mkdir(join(dir.path, 'node'), { recursive: true });
  await chmod(join(inDir, 'secret.jsonl'), 0o000);
  await chmod(join(inDir, 'locked'), 0o000);
  await chmod(join(dir.path, 'private'), 0o000);
  await chmod(join(outDir, 'ro'), 0o555);
  // A sticky, world-writable directory (like /tmp) holding another user's file: the app-server may create its temp
  // file beside it, but not replace that file with it — seen only when the sink publishes.
  await mkdir(join(outDir, 'sticky'));
  await chmod(join(outDir, 'sticky'), 0o1777);
  await writeFile(join(outDir, 'sticky', 'taken.jsonl'), 'nobody owns this\n');
  await chown(join(outDir, 'sticky'), NOBODY.uid, NOBODY.gid);
  await chown(join(outDir, 'sticky', 'taken.jsonl'), NOBODY.uid, NOBODY.gid);
  node = await startNodeProcess({
    nodeId: 'p1',
    dir: join(dir.path, 'node'),
    store: `sqlite:${join(dir.path, 'node', 'store.db')}`,
    roots: [inDir, outDir],
    withoutFileCapabilities: true,
  });
}, 60_000);

afterAll(async () => {
  await node?.child.stop('SIGKILL');
  await dir?.remove();
});

describe('files the app-server may not access', { timeout: 60_000 }, () => {
  it("runs without root's file capabilities and copies what it may read and write", async () => {
    const reply = await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('allowed', join(inDir, 'ok.jsonl'), join(outDir, 'ok.jsonl')),
    });
    expect(reply.status).toBe(201);
    expect((await waitForState(node.url, 'allowed', 'COMPLETED')).result).toMatchObject({
      recordsWritten: 20,
    });
  });

  it('defect: a source or destination the app-server may not access is 403 PATH_NOT_ACCESSIBLE at submit, never 500', async () => {
    const cases = [
      {
        id: 'unreadable-source',
        source: join(inDir, 'secret.jsonl'),
        destination: join(outDir, 'a.jsonl'),
        field: 'source.path',
      },
      {
        id: 'unsearchable-dir',
        source: join(inDir, 'locked', 'x.jsonl'),
        destination: join(outDir, 'b.jsonl'),
        field: 'source.path',
      },
      {
        id: 'read-only-dir',
        source: join(inDir, 'ok.jsonl'),
        destination: join(outDir, 'ro', 'c.jsonl'),
        field: 'destination.path',
      },
      {
        id: 'under-read-only-dir',
        source: join(inDir, 'ok.jsonl'),
        destination: join(outDir, 'ro', 'sub', 'd.jsonl'),
        field: 'destination.path',
      },
    ];
    for (const { id, source, destination, field } of cases) {
      for (const mode of ['idempotent', 'fire-and-forget']) {
        const reply = await call(`${node.url}/v1/transfers`, {
          json: { ...fileTransfer(id, source, destination), mode },
        });
        expect.soft({ id, mode, status: reply.status, body: reply.body }).toMatchObject({
          status: 403,
          body: { code: 'PATH_NOT_ACCESSIBLE', status: 403, errors: [{ path: field }] },
        });
        expect.soft(reply.headers.get('content-type')).toMatch(/application\/problem\+json/);
      }
      expect.soft((await call(`${node.url}/v1/transfers/${id}`)).status).toBe(404);
    }
    expect(await readdir(outDir)).toEqual(['ok.jsonl', 'ro', 'sticky']);
    // Outside the roots stays PATH_NOT_ALLOWED, even where the path cannot be looked into.
    const outside = await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('outside', join(dir.path, 'private', 'x.jsonl'), join(outDir, 'e.jsonl')),
    });
    expect(outside.status).toBe(403);
    expect(outside.body.code).toBe('PATH_NOT_ALLOWED');
  });

  it('defect: a resend of a completed transfer whose source had become unreadable answered 403, not its stored outcome', async () => {
    const request = fileTransfer('done-then-locked', join(inDir, 'later.jsonl'), join(outDir, 'later.jsonl'));
    expect((await call(`${node.url}/v1/transfers`, { json: request })).status).toBe(201);
    const done = await waitForState(node.url, 'done-then-locked', 'COMPLETED');
    await chmod(join(inDir, 'later.jsonl'), 0o000);
    const resent = await call(`${node.url}/v1/transfers`, { json: request });
    expect({ status: resent.status, state: resent.body.state, result: resent.body.result }).toEqual({
      status: 200,
      state: 'COMPLETED',
      result: done.result,
    });
    // A new request for the same file is still refused, before anything is written.
    const fresh = await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('new-on-locked', join(inDir, 'later.jsonl'), join(outDir, 'later-2.jsonl')),
    });
    expect({ status: fresh.status, code: fresh.body.code }).toEqual({
      status: 403,
      code: 'PATH_NOT_ACCESSIBLE',
    });
  });

  it('defect: a destination it cannot publish to at run time fails the transfer with PATH_NOT_ACCESSIBLE and leaves no partial file', async () => {
    const reply = await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('sticky', join(inDir, 'ok.jsonl'), join(outDir, 'sticky', 'taken.jsonl')),
    });
    expect(reply.status).toBe(201);
    const failed = await waitForState(node.url, 'sticky', 'FAILED');
    expect(failed.error).toMatchObject({ code: 'PATH_NOT_ACCESSIBLE' });
    expect(failed.error.message).toMatch(/taken\.jsonl/);
    // The run's temp file is removed once FAILED is recorded (until then it is a successor's resume point).
    await waitFor(async () => (await readdir(join(outDir, 'sticky'))).join() === 'taken.jsonl', {
      timeoutMs: 10_000,
      what: `the temp file to be removed (${(await readdir(join(outDir, 'sticky'))).join()})`,
    });
    expect(await readFile(join(outDir, 'sticky', 'taken.jsonl'), 'utf8')).toBe('nobody owns this\n');
  });
});
