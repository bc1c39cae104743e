/**
 * How large a transfer request may be, as a user meets it over HTTP: one limit, defined once, answered as
 * `413 PAYLOAD_TOO_LARGE` before anything is written — whatever `http.bodyBytes` allows and whatever the mode.
 * Real app-servers on a PostgreSQL store.
 */
import { join } from 'node:path';
import { TRANSFER_REQUEST_MAX_BYTES, TransferRequestSchema } from '@sluice/core';
import { createTestDatabase, sql, type TempDir, type TestDatabase, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, type NodeProcess, startNodeProcess, writeRecords } from './helpers.js';

let dir: TempDir;
let storeDb: TestDatabase;
let node: NodeProcess;
/** A node whose operator raised `http.bodyBytes` (say, for large queries on the host's api-servers). */
let roomy: NodeProcess;
let input: string;

beforeAll(async () => {
  dir = await tempDir('sluice-app-request-size-');
  storeDb = await createTestDatabase('sluice_app_reqsize');
  input = await writeRecords(join(dir.path, 'in.jsonl'), 3);
  const spec = (nodeId: string, extraYaml = '') => ({
    nodeId,
    dir: join(dir.path, nodeId),
    store: storeDb.url,
    roots: [dir.path],
    extraYaml,
  });
  [node, roomy] = await Promise.all([
    startNodeProcess(spec('size1')),
    startNodeProcess(spec('size2', `http: { bodyBytes: ${4 * 1024 * 1024} }`)),
  ]);
}, 90_000);

afterAll(async () => {
  await Promise.allSettled([node?.child.stop('SIGKILL'), roomy?.child.stop('SIGKILL')]);
  await storeDb?.drop();
  await dir?.remove();
});

/** Bytes of the request as it is parsed and stored (defaults filled in). */
const storedBytes = (body: unknown) => Buffer.byteLength(JSON.stringify(TransferRequestSchema.parse(body)));

/** A request for `id` with every default spelled out, padded with properties to exactly `bytes` as stored. */
function requestOf(id: string, bytes: number, mode = 'idempotent') {
  const body = {
    id,
    mode,
    source: { type: 'file', path: input, format: 'jsonl' },
    destination: { type: 'file', path: join(dir.path, 'out', `${id}.jsonl`), format: 'jsonl' },
    properties: {} as Record<string, string>,
    options: { onBadRecord: 'skip' },
  };
  const keys: string[] = [];
  for (let room = bytes - storedBytes(body); room > 0; room = bytes - storedBytes(body)) {
    const key = `p${keys.length}`;
    // `"pN":""`, and a comma before every property but the first.
    const overhead = key.length + 5 + (keys.length === 0 ? 0 : 1);
    const last = keys.at(-1);
    if (room <= overhead && last !== undefined) body.properties[last] += 'x'.repeat(room);
    else {
      body.properties[key] = 'x'.repeat(Math.min(60_000, room - overhead));
      keys.push(key);
    }
  }
  expect(storedBytes(body)).toBe(bytes);
  return body;
}

async function rows(id: string) {
  return (await sql(storeDb.url, 'SELECT id FROM transfers WHERE id = $1', [id])).length;
}

describe('transfer request size', { timeout: 90_000 }, () => {
  it('defect: a request within http.bodyBytes that is over the store\'s 1 MiB was refused 400 VALIDATION_FAILED at a path "request" the body does not have ("larger than the limit" of a body under it), and fire-and-forget ones that size ran', async () => {
    // Under the default body limit as sent; over 1 MiB once the defaults it leaves out are filled in.
    const lean = requestOf('lean', TRANSFER_REQUEST_MAX_BYTES + 40);
    const { mode: _mode, options: _options, ...leaner } = lean;
    const leanerBody = JSON.stringify({
      ...leaner,
      source: { type: 'file', path: input },
      destination: { type: 'file', path: lean.destination.path },
    });
    expect(Buffer.byteLength(leanerBody)).toBeLessThan(1024 * 1024);
    expect(storedBytes(JSON.parse(leanerBody))).toBeGreaterThan(TRANSFER_REQUEST_MAX_BYTES);
    const big = requestOf('big', 2 * 1024 * 1024);

    const answers = {
      lean: await call(`${node.url}/v1/transfers`, { raw: leanerBody, contentType: 'application/json' }),
      big: await call(`${roomy.url}/v1/transfers`, { json: big }),
      bigFireAndForget: await call(`${roomy.url}/v1/transfers`, {
        json: { ...big, id: 'big-ff', mode: 'fire-and-forget' },
      }),
    };
    const refused = {
      status: 413,
      code: 'PAYLOAD_TOO_LARGE',
      limitBytes: TRANSFER_REQUEST_MAX_BYTES,
      path: undefined,
    };
    expect(
      Object.fromEntries(
        Object.entries(answers).map(([name, reply]) => [
          name,
          {
            status: reply.status,
            code: reply.body.code,
            limitBytes: reply.body.limitBytes,
            path: reply.body.errors?.[0]?.path,
          },
        ]),
      ),
    ).toEqual({ lean: refused, big: refused, bigFireAndForget: refused });
    expect(answers.big.body.detail).toMatch(/transfer request/);
    expect({ lean: await rows('lean'), big: await rows('big') }).toEqual({ lean: 0, big: 0 });
  });

  it('accepts a request of exactly the limit as stored, refuses one byte more', async () => {
    const atLimit = requestOf('at-limit', TRANSFER_REQUEST_MAX_BYTES);
    const over = requestOf('over-limit', TRANSFER_REQUEST_MAX_BYTES + 1);
    const accepted = await call(`${roomy.url}/v1/transfers`, { json: atLimit });
    expect({ status: accepted.status, state: accepted.body.state }).toEqual({
      status: 201,
      state: 'IN_PROGRESS',
    });
    const refused = await call(`${roomy.url}/v1/transfers`, { json: over });
    expect({ status: refused.status, code: refused.body.code }).toEqual({
      status: 413,
      code: 'PAYLOAD_TOO_LARGE',
    });
    expect({ atLimit: await rows('at-limit'), over: await rows('over-limit') }).toEqual({
      atLimit: 1,
      over: 0,
    });
  });
});
