/**
 * One real app-server process on a PostgreSQL store: what it prints about the store's URL (`--check`, the
 * `app-server ready` line) and what it answers when the store's schema disappears under it.
 */
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createTestDatabase, spawnTs, sql, type TestDatabase, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, call, fileTransfer, type NodeProcess, startNodeProcess, writeRecords } from './helpers.js';

let dir: Awaited<ReturnType<typeof tempDir>>;
let db: TestDatabase;

beforeAll(async () => {
  dir = await tempDir('sluice-app-pg-store-');
  db = await createTestDatabase('sluice_app_store');
}, 60_000);

afterAll(async () => {
  await db?.drop();
  await dir?.remove();
});

/** The store URL with libpq's `password` query parameter (PostgreSQL here trusts the connection: it is ignored). */
const withPassword = (url: string) => `${url}?password=storepw`;

describe('app-server on a PostgreSQL store', { timeout: 90_000 }, () => {
  it('defect: --check and the "app-server ready" line printed ?password= and a NATS token in clear', async () => {
    const cwd = join(dir.path, 'check');
    await mkdir(cwd, { recursive: true });
    await writeFile(
      join(cwd, 'sluice.yaml'),
      [
        `store: "${withPassword(db.url)}"`,
        'nats: "nats://mytoken123@127.0.0.1:4222"',
        'connections: { wh: { type: postgres, url: "postgres://r@wh/sales?sslpassword=keypw&sslkey=/k.pem" } }',
      ].join('\n'),
    );
    const check = spawnTs(BIN, ['--config', 'sluice.yaml', '--check'], { cwd });
    expect((await check.exited).code).toBe(0);
    const printed = JSON.parse(check.output());
    expect(printed.store).toBe(`${db.url}?password=***`);
    expect(printed.nats).toBe('nats://***@127.0.0.1:4222');
    expect(printed.connections.wh.url).toBe('postgres://r@wh/sales?sslpassword=***&sslkey=/k.pem');
    for (const secret of ['storepw', 'mytoken123', 'keypw']) expect(check.output()).not.toContain(secret);

    await using node = await startNodeProcess({
      nodeId: 'pg-ready',
      dir: join(dir.path, 'ready'),
      store: withPassword(db.url),
      roots: [dir.path],
    });
    const ready = node.child.lines.find((line) => line.includes('app-server ready'));
    expect(ready).toBeDefined();
    expect(JSON.parse(ready!).store).toBe(`${db.url}?password=***`);
    expect(node.child.output()).not.toContain('storepw');
  });
});

describe('app-server whose PostgreSQL schema disappears', { timeout: 90_000 }, () => {
  let node: NodeProcess;
  let schemaDb: TestDatabase;
  beforeAll(async () => {
    schemaDb = await createTestDatabase('sluice_app_schema');
    node = await startNodeProcess({
      nodeId: 'pg-schema',
      dir: join(dir.path, 'schema'),
      store: schemaDb.url,
      roots: [join(dir.path, 'files')],
    });
  }, 60_000);
  afterAll(async () => {
    await node?.child.stop('SIGKILL');
    await schemaDb?.drop();
  });

  it('defect: after DROP TABLE transfers, /readyz said ready and every transfer request was 500 INTERNAL; now 503 not-ready and STORE_UNAVAILABLE naming the missing schema', async () => {
    const source = await writeRecords(join(dir.path, 'files', 'in.jsonl'), 3);
    expect((await call(`${node.url}/readyz`)).status).toBe(200);
    await sql(schemaDb.url, 'DROP TABLE transfers CASCADE');

    const ready = await call(`${node.url}/readyz`);
    expect(ready.status).toBe(503);
    expect(ready.body).toMatchObject({ status: 'not-ready', store: 'schema-missing' });

    const submitted = await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('after-drop', source, join(dir.path, 'files', 'out.jsonl')),
    });
    expect(submitted.status).toBe(503);
    expect(submitted.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(submitted.body).toMatchObject({ code: 'STORE_UNAVAILABLE', reason: 'schema-missing' });
    expect(submitted.body.detail).toMatch(/schema is missing/);
    const read = await call(`${node.url}/v1/transfers/after-drop`);
    expect({ status: read.status, code: read.body.code }).toEqual({ status: 503, code: 'STORE_UNAVAILABLE' });
    const listed = await call(`${node.url}/v1/transfers`);
    expect({ status: listed.status, code: listed.body.code }).toEqual({
      status: 503,
      code: 'STORE_UNAVAILABLE',
    });
    // Nothing written, and the node did not recreate the table behind the operator's back.
    expect(await readdir(join(dir.path, 'files'))).toEqual(['in.jsonl']);
    const [row] = await sql<{ t: string | null }>(schemaDb.url, "select to_regclass('transfers')::text as t");
    expect(row?.t).toBeNull();
  });
});
