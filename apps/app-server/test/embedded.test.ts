/**
 * One real app-server process on embedded defaults (SQLite + LMDB + single-node backplane, no PostgreSQL, no
 * NATS): every bad-input class is refused with the right problem and writes nothing; idempotence holds across a
 * process restart; probes, metrics and the OpenAPI document.
 */
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { openStore } from '@sluice/store';
import { freePort, spawnTs, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BIN,
  call,
  exactlyOnce,
  fileTransfer,
  type NodeProcess,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

let dir: Awaited<ReturnType<typeof tempDir>>;
let outside: Awaited<ReturnType<typeof tempDir>>;
let node: NodeProcess;
let roots: string[];
let storeUrl: string;

async function start(): Promise<NodeProcess> {
  return startNodeProcess({
    nodeId: 'solo',
    dir: join(dir.path, 'node'),
    store: storeUrl,
    roots,
    extraYaml: [
      // Written the way sluice.yaml files were before the sections: still applied (413 above 4096 bytes, a queue
      // of 1), with one start-up warning per key.
      'limits: { bodyBytes: 4096, maxConcurrentTransfers: 1, queueSize: 1 }',
      'connections: { warehouse: { type: postgres, url: "postgres://nobody@127.0.0.1:1/none" } }',
    ].join('\n'),
  });
}

/** Number of transfer records in the store (read through the API). */
async function recordCount(): Promise<number> {
  const reply = await call(`${node.url}/v1/transfers?limit=500`);
  expect(reply.status).toBe(200);
  return reply.body.records.length;
}

beforeAll(async () => {
  dir = await tempDir('sluice-app-embedded-');
  outside = await tempDir('sluice-app-outside-');
  roots = [join(dir.path, 'in'), join(dir.path, 'out')];
  await mkdir(roots[0]!, { recursive: true });
  await mkdir(roots[1]!, { recursive: true });
  storeUrl = `sqlite:${join(dir.path, 'node', '.sluice', 'store.db')}`;
  node = await start();
}, 60_000);

afterAll(async () => {
  await node?.child.stop('SIGKILL');
  await dir?.remove();
  await outside?.remove();
});

describe('app-server on embedded defaults', { timeout: 90_000 }, () => {
  it('logs one warning per key of the old limits section, naming its new place', () => {
    const warnings = node.child.lines
      .filter((line) => line.includes('is deprecated'))
      .map((line) => JSON.parse(line) as { level: number; key: string; movedTo: string; msg: string });
    expect(warnings.map(({ level, key, movedTo }) => ({ level, key, movedTo }))).toEqual([
      { level: 40, key: 'limits.bodyBytes', movedTo: 'http.bodyBytes' },
      { level: 40, key: 'limits.maxConcurrentTransfers', movedTo: 'transfers.maxConcurrentTransfers' },
      { level: 40, key: 'limits.queueSize', movedTo: 'transfers.queueSize' },
    ]);
    expect(warnings[0]?.msg).toMatch(
      /sluice\.yaml: limits\.bodyBytes is deprecated: it is now http\.bodyBytes/,
    );
  });

  it('refuses every bad-input class with a problem+json body and writes nothing', async () => {
    const source = await writeRecords(join(roots[0]!, 'ok.jsonl'), 10);
    const out = (name: string) => join(roots[1]!, name);
    await symlink(outside.path, join(roots[1]!, 'escape'));
    await writeFile(join(outside.path, 'secret.jsonl'), '{"id":1}\n');
    const url = `${node.url}/v1/transfers`;
    const valid = fileTransfer('bad-1', source, out('bad-1.jsonl'));
    const cases: Array<{
      name: string;
      init: Parameters<typeof call>[1];
      status: number;
      code: string;
      path?: string;
    }> = [
      {
        name: 'invalid body',
        init: { json: { ...valid, source: { type: 'file' } } },
        status: 400,
        code: 'VALIDATION_FAILED',
        path: 'source.path',
      },
      {
        name: 'bad id',
        init: { json: { ...valid, id: 'has space' } },
        status: 400,
        code: 'VALIDATION_FAILED',
        path: 'id',
      },
      {
        // A dot-segment: every URL client resolves it away, so the transfer could never be read or terminated.
        name: 'dot-segment id',
        init: { json: { ...valid, id: '..' } },
        status: 400,
        code: 'VALIDATION_FAILED',
        path: 'id',
      },
      {
        name: 'unknown field',
        init: { json: { ...valid, extra: 1 } },
        status: 400,
        code: 'VALIDATION_FAILED',
      },
      {
        name: 'unknown source type',
        init: { json: { ...valid, source: { type: 'ftp', path: 'x' } } },
        status: 422,
        code: 'UNSUPPORTED_ADDRESS_TYPE',
      },
      {
        name: 'unknown destination type',
        init: { json: { ...valid, destination: { type: 's3', bucket: 'x' } } },
        status: 422,
        code: 'UNSUPPORTED_ADDRESS_TYPE',
      },
      {
        name: 'body over the limit',
        init: { json: { ...valid, properties: { big: 'x'.repeat(5_000) } } },
        status: 413,
        code: 'PAYLOAD_TOO_LARGE',
      },
      {
        name: 'malformed JSON',
        init: { raw: '{"id": "x",', contentType: 'application/json' },
        status: 400,
        code: 'MALFORMED_JSON',
      },
      {
        name: 'empty JSON',
        init: { raw: '', contentType: 'application/json' },
        status: 400,
        code: 'MALFORMED_JSON',
      },
      {
        name: 'text/plain',
        init: { raw: JSON.stringify(valid), contentType: 'text/plain' },
        status: 415,
        code: 'UNSUPPORTED_MEDIA_TYPE',
      },
      {
        name: 'form content type',
        init: { raw: 'id=1', contentType: 'application/x-www-form-urlencoded' },
        status: 415,
        code: 'UNSUPPORTED_MEDIA_TYPE',
      },
      {
        name: 'path outside the roots',
        init: { json: { ...valid, source: { type: 'file', path: '/etc/passwd', format: 'jsonl' } } },
        status: 403,
        code: 'PATH_NOT_ALLOWED',
      },
      {
        name: 'escape through ..',
        init: {
          json: {
            ...valid,
            destination: { type: 'file', path: `${roots[1]}/../../x.jsonl`, format: 'jsonl' },
          },
        },
        status: 403,
        code: 'PATH_NOT_ALLOWED',
      },
      {
        name: 'escape through a symlink',
        init: {
          json: {
            ...valid,
            destination: { type: 'file', path: out('escape/stolen.jsonl'), format: 'jsonl' },
          },
        },
        status: 403,
        code: 'PATH_NOT_ALLOWED',
      },
      {
        name: 'unknown connection',
        init: { json: { ...valid, source: { type: 'postgres', connection: 'nope', table: 't' } } },
        status: 422,
        code: 'UNKNOWN_CONNECTION',
      },
      {
        name: 'header and body ids differ',
        init: { json: valid, headers: { 'idempotency-key': 'other-id' } },
        status: 400,
        code: 'IDEMPOTENCY_KEY_MISMATCH',
      },
      {
        name: 'bad Idempotency-Key header',
        init: { json: { ...valid, id: undefined }, headers: { 'idempotency-key': 'bad key!' } },
        status: 400,
        code: 'VALIDATION_FAILED',
      },
      {
        name: 'array body',
        init: { json: [valid] },
        status: 400,
        code: 'VALIDATION_FAILED',
      },
    ];
    for (const testCase of cases) {
      const reply = await call(url, testCase.init);
      expect(reply.status, testCase.name).toBe(testCase.status);
      expect(reply.headers.get('content-type'), testCase.name).toMatch(/^application\/problem\+json/);
      expect(reply.body, testCase.name).toMatchObject({
        code: testCase.code,
        status: testCase.status,
        type: expect.any(String),
        title: expect.any(String),
        detail: expect.any(String),
      });
      if (testCase.path) {
        expect(
          reply.body.errors.map((e: { path: string }) => e.path),
          testCase.name,
        ).toContain(testCase.path);
      }
    }
    expect(await recordCount()).toBe(0);
    expect(await readdir(roots[1]!)).toEqual(['escape']);
    expect(await readdir(outside.path)).toEqual(['secret.jsonl']);
    expect((await call(`${node.url}/v1/transfers/bad-1`)).status).toBe(404);
    expect((await call(`${node.url}/v1/transfers/bad-1`)).body.code).toBe('TRANSFER_NOT_FOUND');
    expect((await call(`${node.url}/v1/transfers?state=NOPE`)).status).toBe(400);
    expect((await call(`${node.url}/v1/nope`)).body.code).toBe('NOT_FOUND');
    // The Idempotency-Key header alone can carry the id.
    const byHeader = await call(url, {
      json: { ...fileTransfer('x', source, out('hdr.jsonl')), id: undefined },
      headers: { 'idempotency-key': 'by-header-1' },
    });
    expect(byHeader.status).toBe(201);
    expect(byHeader.body.id).toBe('by-header-1');
    await waitForState(node.url, 'by-header-1', 'COMPLETED');
    expect(await exactlyOnce(out('hdr.jsonl'), 10)).toBeNull();
  });

  it('defect: a path that cannot exist (file as parent, name over 255 bytes, symlink loop) answered 500 INTERNAL, and a root as destination wrote its temp outside the roots; now 400 VALIDATION_FAILED, nothing written', async () => {
    const source = await writeRecords(join(roots[0]!, 'small.jsonl'), 3);
    await symlink('loop2', join(roots[1]!, 'loop1'));
    await symlink('loop1', join(roots[1]!, 'loop2'));
    const before = { out: await readdir(roots[1]!), parent: await readdir(dir.path) };
    const cases: Array<[name: string, side: 'source' | 'destination', path: string]> = [
      ['source under a file', 'source', `${source}/x`],
      ['destination under a file', 'destination', `${source}/x`],
      ['source name of 256 characters', 'source', join(roots[0]!, 'n'.repeat(256))],
      ['destination name of 300 characters', 'destination', join(roots[1]!, `${'n'.repeat(300)}.jsonl`)],
      ['source symlink loop', 'source', join(roots[1]!, 'loop1')],
      ['destination symlink loop', 'destination', join(roots[1]!, 'loop1')],
      ['destination is a root', 'destination', roots[1]!],
    ];
    for (const [i, [name, side, path]] of cases.entries()) {
      const body = fileTransfer(`cannot-exist-${i}`, source, join(roots[1]!, `cannot-exist-${i}.jsonl`));
      body[side] = { type: 'file', path, format: 'jsonl' };
      const reply = await call(`${node.url}/v1/transfers`, { json: body });
      expect({ name, status: reply.status, code: reply.body.code }).toEqual({
        name,
        status: 400,
        code: 'VALIDATION_FAILED',
      });
      expect(reply.headers.get('content-type'), name).toMatch(/^application\/problem\+json/);
      expect(
        reply.body.errors.map((e: { path: string }) => e.path),
        name,
      ).toEqual([`${side}.path`]);
      expect((await call(`${node.url}/v1/transfers/cannot-exist-${i}`)).status, name).toBe(404);
    }
    // Nothing written: no destination, no temp file in a root or beside it (the parent of the roots).
    expect(await readdir(roots[1]!)).toEqual(before.out);
    expect(await readdir(dir.path)).toEqual(before.parent);
  });

  it('answers 429 with Retry-After when its transfer queue is full, fire-and-forget runs without a record', async () => {
    const source = await writeRecords(join(roots[0]!, 'slow.jsonl'), 400);
    const replies = [];
    for (let i = 0; i < 3; i++)
      replies.push(
        await call(`${node.url}/v1/transfers`, {
          json: fileTransfer(`q-${i}`, source, join(roots[1]!, `q-${i}.jsonl`), 400),
        }),
      );
    expect(replies.map((r) => r.status)).toEqual([201, 201, 429]);
    expect(replies[2]!.headers.get('retry-after')).toBe('1');
    expect(replies[2]!.body.code).toBe('QUEUE_FULL');
    expect((await call(`${node.url}/v1/transfers/q-2`)).status).toBe(404);
    // Resends of stored ids are answered from their records (running or finished), never refused for the queue.
    for (const id of ['q-0', 'q-1']) {
      const resent = await call(`${node.url}/v1/transfers`, {
        json: fileTransfer(id, source, join(roots[1]!, `${id}.jsonl`), 400),
      });
      expect([200, 202]).toContain(resent.status);
      expect(resent.body.id).toBe(id);
    }
    const queued = await call(`${node.url}/v1/transfers/q-1`);
    expect(queued.body.state).toBe('IN_PROGRESS');
    await waitForState(node.url, 'q-1', 'COMPLETED');
    const fire = await call(`${node.url}/v1/transfers`, {
      json: { ...fileTransfer('ff-1', source, join(roots[1]!, 'ff.jsonl')), mode: 'fire-and-forget' },
    });
    expect(fire.status).toBe(202);
    expect(fire.body).toMatchObject({ id: 'ff-1', mode: 'fire-and-forget', accepted: true });
    await node.child.waitForLine(/fire-and-forget transfer completed/, 10_000);
    expect(await exactlyOnce(join(roots[1]!, 'ff.jsonl'), 400)).toBeNull();
    expect((await call(`${node.url}/v1/transfers/ff-1`)).status).toBe(404);
  });

  it('defect: a transfer with an id over 100 characters was stored but could not be read or terminated (the router refused its path in its own shape)', async () => {
    const source = await writeRecords(join(roots[0]!, 'long-id.jsonl'), 5);
    // The longest id the API accepts (200 characters).
    const id = `long-${'x'.repeat(195)}`;
    const created = await call(`${node.url}/v1/transfers`, {
      json: fileTransfer(id, source, join(roots[1]!, 'long-id.jsonl')),
    });
    expect(created.status).toBe(201);
    await waitForState(node.url, id, 'COMPLETED');
    const read = await call(`${node.url}/v1/transfers/${id}`);
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({ id, state: 'COMPLETED' });
    const terminated = await call(`${node.url}/v1/transfers/${id}/terminate`, { method: 'POST' });
    expect(terminated.status).toBe(409);
    expect(terminated.body.code).toBe('ILLEGAL_TRANSITION');
    // Longer than any id: refused as a problem naming the limit, whichever layer refuses it.
    const tooLong = await call(`${node.url}/v1/transfers/${'y'.repeat(5_000)}`);
    expect(tooLong.status).toBe(400);
    expect(tooLong.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(tooLong.body.code).toBe('VALIDATION_FAILED');
    // A malformed percent-encoding in the path is a problem too.
    const badUrl = await call(`${node.url}/v1/transfers/%E0%A4%A`);
    expect(badUrl.status).toBe(400);
    expect(badUrl.body.code).toBe('VALIDATION_FAILED');
  });

  it('defect: a wrong method on a known path answered 404 NOT_FOUND, as if the path did not exist — now 405 METHOD_NOT_ALLOWED with Allow', async () => {
    const cases: Array<[string, string, string]> = [
      ['PUT', '/v1/transfers', 'GET, HEAD, POST'],
      ['DELETE', '/v1/transfers/some-id', 'GET, HEAD'],
      ['GET', '/v1/transfers/some-id/terminate', 'POST'],
      ['DELETE', '/v1/endpoints/items/rollback', 'POST'],
      ['POST', '/v1/endpoints/items/generations', 'GET, HEAD'],
      ['POST', '/v1/endpoints/stream', 'GET, HEAD'],
      ['DELETE', '/v1/nodes', 'GET, HEAD'],
    ];
    for (const [method, path, allow] of cases) {
      const reply = await call(`${node.url}${path}`, { method });
      const name = `${method} ${path}`;
      expect(reply.status, name).toBe(405);
      expect(reply.headers.get('allow'), name).toBe(allow);
      expect(reply.headers.get('content-type'), name).toMatch(/^application\/problem\+json/);
      expect(reply.body, name).toMatchObject({
        status: 405,
        code: 'METHOD_NOT_ALLOWED',
        instance: path,
        allow: allow.split(', '),
      });
    }
    const unknown = await call(`${node.url}/v1/transfer`, { method: 'PUT' });
    expect(unknown.status).toBe(404);
    expect(unknown.body.code).toBe('NOT_FOUND');
    expect(unknown.headers.get('allow')).toBeNull();
  });

  it('defect: a JSON body of null was taken as no body (a rollback ran) — now 400 VALIDATION_FAILED: the body must be a JSON object', async () => {
    for (const path of ['/v1/transfers', '/v1/endpoints/items/rollback']) {
      const reply = await call(`${node.url}${path}`, { raw: 'null', contentType: 'application/json' });
      expect(reply.status, path).toBe(400);
      expect(reply.body, path).toMatchObject({
        code: 'VALIDATION_FAILED',
        instance: path,
        errors: [{ path: '(root)' }],
      });
      expect(reply.body.detail, path).toMatch(/the body must be a JSON object/);
    }
    // A rollback without a body is still the rollback to the generation before (here: no such endpoint).
    const bare = await call(`${node.url}/v1/endpoints/items/rollback`, { method: 'POST' });
    expect(bare.status).toBe(404);
    expect(bare.body.code).toBe('UNKNOWN_ENDPOINT');
  });

  it('defect: unknown query-string parameters were silently accepted — now 400 VALIDATION_FAILED naming each', async () => {
    const cases: Array<[string, string, string?]> = [
      ['/v1/transfers/some-id?foo=1', 'querystring.foo'],
      ['/v1/transfers?limit=5&stat=FAILED', 'querystring.stat'],
      ['/v1/transfers/some-id/terminate?force=true', 'querystring.force', 'POST'],
      ['/v1/endpoints?all=1', 'querystring.all'],
      ['/v1/endpoints/items/generations?limit=1', 'querystring.limit'],
      ['/v1/endpoints/items/rebuild?now=1', 'querystring.now', 'POST'],
      ['/v1/endpoints/items/promote?x=', 'querystring.x', 'POST'],
      ['/v1/endpoints/items/rollback?to=items-1', 'querystring.to', 'POST'],
      ['/v1/endpoints/stream?heartbeat=1000', 'querystring.heartbeat'],
      ['/v1/nodes?alive=true', 'querystring.alive'],
    ];
    for (const [path, failing, method] of cases) {
      const reply = await call(`${node.url}${path}`, method ? { method } : {});
      const key = failing.split('.')[1];
      expect(reply.status, path).toBe(400);
      expect(reply.body, path).toMatchObject({
        code: 'VALIDATION_FAILED',
        instance: path.split('?')[0],
        detail: `Invalid querystring: ${failing}: Unrecognized key: "${key}"`,
        errors: [{ path: failing, message: `Unrecognized key: "${key}"` }],
      });
    }
    // The documented parameters still work; probes and metrics stay lenient.
    expect((await call(`${node.url}/v1/transfers?limit=1&state=COMPLETED`)).status).toBe(200);
    expect((await call(`${node.url}/healthz?probe=1`)).status).toBe(200);
    expect((await call(`${node.url}/metrics?x=1`)).status).toBe(200);
  });

  it('keeps the idempotence guarantees across a process restart (no PostgreSQL, no NATS)', async () => {
    const source = await writeRecords(join(roots[0]!, 'restart.jsonl'), 3_000);
    const destination = join(roots[1]!, 'restart-out.jsonl');
    const body = fileTransfer('restart-1', source, destination, 1_000);
    const first = await call(`${node.url}/v1/transfers`, { json: body });
    expect(first.status).toBe(201);
    await waitForState(node.url, 'restart-1', 'IN_PROGRESS');
    const store = await openStore(storeUrl);
    try {
      const deadline = Date.now() + 15_000;
      while (!(await store.get('restart-1'))?.checkpoint && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      // The kill must land mid-transfer, after a checkpoint: otherwise this proves nothing about resuming.
      const atKill = await store.get('restart-1');
      expect(atKill?.checkpoint).toBeTruthy();
      expect(atKill?.state).toBe('IN_PROGRESS');
      await node.child.stop('SIGKILL');
    } finally {
      await store[Symbol.asyncDispose]();
    }
    node = await start();
    const resubmit = await call(`${node.url}/v1/transfers`, { json: body });
    expect([200, 202]).toContain(resubmit.status);
    if (resubmit.status === 202) expect(resubmit.body.owner.nodeId).toBe('solo');
    const done = await waitForState(node.url, 'restart-1', 'COMPLETED');
    expect(done.attempts).toBe(2);
    expect(await exactlyOnce(destination, 3_000)).toBeNull();
    const again = await call(`${node.url}/v1/transfers`, { json: body });
    expect(again.status).toBe(200);
    expect(again.body.result.recordsWritten).toBe(3_000);
    const conflict = await call(`${node.url}/v1/transfers`, { json: { ...body, properties: { x: 1 } } });
    expect(conflict.status).toBe(422);
    expect(conflict.body.code).toBe('IDEMPOTENCY_CONFLICT');
  });

  it('serves probes, metrics, the OpenAPI document and docs; SIGTERM exits 0', async () => {
    expect((await call(`${node.url}/healthz`)).body.status).toBe('ok');
    const ready = await call(`${node.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(ready.body).toMatchObject({ store: 'up', backplane: 'up', backplaneKind: 'single' });
    const metrics = await call(`${node.url}/metrics`);
    expect(metrics.body).toMatch(/sluice_transfers\{state="running"\}/);
    expect(metrics.body).toMatch(/sluice_takeovers_total\{via="(restart|resubmit|sweeper)"\} 1/);
    const openapi = await call(`${node.url}/openapi.json`);
    expect(openapi.body.openapi).toMatch(/^3\./);
    expect(Object.keys(openapi.body.paths)).toEqual(
      expect.arrayContaining(['/v1/transfers', '/v1/transfers/{id}', '/v1/endpoints', '/v1/nodes']),
    );
    const requestBody = openapi.body.paths['/v1/transfers'].post.requestBody;
    expect(JSON.stringify(requestBody)).toContain('destination');
    const docs = await fetch(`${node.url}/docs`);
    expect(docs.status).toBe(200);
    const exit = await node.child.stop('SIGTERM');
    expect(exit.code).toBe(0);
    expect(existsSync(join(dir.path, 'node', '.sluice', 'store.db'))).toBe(true);
  });

  it('starts on embedded defaults with no configuration file at all', async () => {
    await using cwd = await tempDir('sluice-app-defaults-');
    const port = await freePort();
    const child = spawnTs(BIN, [], {
      cwd: cwd.path,
      env: { SLUICE_PORT: String(port), SLUICE_NODE_ID: 'bare' },
    });
    try {
      await child.waitForLine(/app-server ready/, 60_000);
      const ready = await call(`http://127.0.0.1:${port}/readyz`);
      expect(ready.body).toMatchObject({ status: 'ready', backplaneKind: 'single' });
      const nodes = await call(`http://127.0.0.1:${port}/v1/nodes`);
      expect(nodes.body.nodes[0]).toMatchObject({ nodeId: 'bare', address: `http://127.0.0.1:${port}` });
      expect(existsSync(join(cwd.path, '.sluice', 'store.db'))).toBe(true);
      expect(existsSync(join(cwd.path, '.sluice', 'aliases'))).toBe(true);
      expect(readFileSync(join(cwd.path, '.sluice', 'app-server.pid'), 'utf8').trim()).toBe(
        String(child.pid),
      );

      // A second app-server on the same data directory is refused before it opens anything there.
      const second = spawnTs(BIN, [], { cwd: cwd.path, env: { SLUICE_PORT: String(await freePort()) } });
      expect((await second.exited).code).toBe(1);
      expect(second.output()).toContain(`Another app-server (pid ${child.pid}) is using the data directory`);
      // One on another data directory but the same port: a one-line error, not a stack trace.
      await using other = await tempDir('sluice-app-port-');
      const third = spawnTs(BIN, [], { cwd: other.path, env: { SLUICE_PORT: String(port) } });
      expect((await third.exited).code).toBe(1);
      expect(third.output()).toMatch(new RegExp(`127\\.0\\.0\\.1:${port} is already in use`));
      expect(third.output()).not.toMatch(/\n\s+at /);

      expect((await child.stop('SIGTERM')).code).toBe(0);
      expect(existsSync(join(cwd.path, '.sluice', 'app-server.pid'))).toBe(false);

      // A SIGKILLed app-server leaves its pid file behind; the next one takes it over.
      const killed = spawnTs(BIN, [], { cwd: cwd.path, env: { SLUICE_PORT: String(port) } });
      await killed.waitForLine(/app-server ready/, 60_000);
      await killed.stop('SIGKILL');
      expect(existsSync(join(cwd.path, '.sluice', 'app-server.pid'))).toBe(true);
      const next = spawnTs(BIN, [], { cwd: cwd.path, env: { SLUICE_PORT: String(port) } });
      try {
        await next.waitForLine(/app-server ready/, 60_000);
        expect((await next.stop('SIGTERM')).code).toBe(0);
      } finally {
        await next[Symbol.asyncDispose]();
      }
    } finally {
      await child[Symbol.asyncDispose]();
    }
  }, 120_000);

  it('fails at start on a bad configuration, naming the field', async () => {
    const file = join(dir.path, 'bad.yaml');
    await writeFile(file, 'node: { id: n1, port: 70000 }\n');
    const child = spawnTs(BIN, ['--config', file], { cwd: dir.path });
    const exit = await child.exited;
    expect(exit.code).toBe(1);
    expect(child.output()).toMatch(/CONFIG_INVALID/);
    expect(child.output()).toMatch(/node\.port/);
  });

  it('names a mistyped command and the commands there are, and exits 1 without starting', async () => {
    const child = spawnTs(BIN, ['slot'], { cwd: dir.path });
    expect((await child.exited).code).toBe(1);
    expect(child.output()).toContain("error: unknown command 'slot' (commands: slots)");
    expect(child.output()).not.toContain('too many arguments');
  });
});
