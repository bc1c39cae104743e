/**
 * The idempotency fingerprint through the HTTP API: a resend is "the same request" when it *means* the same —
 * however a client library spells it (a key as a string or a one-element list, defaults omitted or given, object
 * keys in any order) — and records stored before the fingerprint was normalized still match their resends. One
 * real app-server on a PostgreSQL store; the destination counts every physical write (a trigger), so a second run
 * would show.
 */
import { join } from 'node:path';
import { hashJson, parseTransferRequest } from '@sluice/core';
import { createTestDatabase, sql, type TempDir, type TestDatabase, tempDir } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  call,
  createCountedDestination,
  type NodeProcess,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

const ROWS = 20;

let dir: TempDir;
let storeDb: TestDatabase;
let dst: TestDatabase;
let node: NodeProcess;
/** A second node on the same store: its resends reach the store's insert first (it has not seen the ids). */
let peer: NodeProcess;
let writes: Awaited<ReturnType<typeof createCountedDestination>>;
let input: string;

beforeAll(async () => {
  dir = await tempDir('sluice-app-fingerprint-');
  storeDb = await createTestDatabase('sluice_app_fp');
  dst = await createTestDatabase('sluice_app_fp_dst');
  writes = await createCountedDestination(dst.url);
  await sql(dst.url, 'CREATE TABLE src (id integer PRIMARY KEY, value double precision, category text)');
  await sql(dst.url, "INSERT INTO src SELECT g, g * 1.5, 'a' FROM generate_series(1, 5) AS g");
  input = await writeRecords(join(dir.path, 'in.jsonl'), ROWS);
  const spec = (nodeId: string) => ({
    nodeId,
    dir: join(dir.path, nodeId),
    store: storeDb.url,
    roots: [dir.path],
    extraYaml: `connections: { wh: { type: postgres, url: "${dst.url}" } }`,
  });
  [node, peer] = await Promise.all([startNodeProcess(spec('fp1')), startNodeProcess(spec('fp2'))]);
}, 90_000);

afterAll(async () => {
  await Promise.allSettled([node?.child.stop('SIGKILL'), peer?.child.stop('SIGKILL')]);
  await dst?.drop();
  await storeDb?.drop();
  await dir?.remove();
});

/** The same object with every key order reversed, recursively: what another JSON serializer may send. */
function reversedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reversedKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value)
      .reverse()
      .map(([k, v]) => [k, reversedKeys(v)]),
  );
}

/** Status, code or state, epoch and attempts of a reply: enough to tell a stored answer from a conflict or a rerun. */
function summary(reply: { status: number; body: Record<string, unknown> }) {
  return {
    status: reply.status,
    what: reply.body.code ?? reply.body.state,
    epoch: reply.body.epoch,
    attempts: reply.body.attempts,
  };
}

describe('idempotency fingerprint over HTTP (PostgreSQL store)', { timeout: 90_000 }, () => {
  it('defect: a resend that spells the same request differently (key "id" vs ["id"], defaults given, follow: false, capture "poll", keys reordered) was refused 422 IDEMPOTENCY_CONFLICT', async () => {
    const written = {
      id: 'fp-file-to-pg',
      source: { type: 'file', path: input },
      destination: { type: 'postgres', connection: 'wh', table: 'dst', key: 'id' },
    };
    const created = await call(`${node.url}/v1/transfers`, { json: written });
    expect(created.status).toBe(201);
    await waitForState(node.url, written.id, 'COMPLETED');

    const respellings: Record<string, unknown> = {
      'key as a list': { ...written, destination: { ...written.destination, key: ['id'] } },
      'defaults given': {
        ...written,
        mode: 'idempotent',
        source: { ...written.source, format: 'jsonl', follow: false },
        properties: {},
        options: { onBadRecord: 'skip', follow: false },
      },
      'keys reordered, key as a list': reversedKeys({
        ...written,
        destination: { ...written.destination, key: ['id'] },
      }),
    };
    // Each spelling to both nodes: the submitting node checks the record it read, the peer the store's insert.
    const answers = Object.fromEntries(
      await Promise.all(
        Object.entries(respellings).flatMap(([name, json]) =>
          [node, peer].map(async (to) => [
            `${name} → ${to.nodeId}`,
            summary(await call(`${to.url}/v1/transfers`, { json })),
          ]),
        ),
      ),
    );
    const stored = { status: 200, what: 'COMPLETED', epoch: 1, attempts: 1 };
    expect(answers).toEqual(
      Object.fromEntries(
        Object.keys(respellings).flatMap((name) => [
          [`${name} → fp1`, stored],
          [`${name} → fp2`, stored],
        ]),
      ),
    );
    // Ran once: every row written exactly once.
    expect(await writes.counts()).toEqual({ n: ROWS, d: ROWS });

    // A PostgreSQL source: capture "poll" is what a transfer source reads without one; a one-column key either way.
    const fromTable = {
      id: 'fp-pg-to-file',
      source: { type: 'postgres', connection: 'wh', table: 'src', key: ['id'] },
      destination: { type: 'file', path: join(dir.path, 'out', 'src.jsonl') },
    };
    expect((await call(`${node.url}/v1/transfers`, { json: fromTable })).status).toBe(201);
    await waitForState(node.url, fromTable.id, 'COMPLETED');
    const resent = await call(`${node.url}/v1/transfers`, {
      json: { ...fromTable, source: { ...fromTable.source, key: 'id', capture: 'poll' } },
    });
    expect(summary(resent)).toEqual(stored);

    // A resend that means something else is still a conflict, and changes nothing.
    const other = await call(`${node.url}/v1/transfers`, {
      json: { ...written, destination: { ...written.destination, key: ['id', 'category'] } },
    });
    expect({ status: other.status, code: other.body.code }).toEqual({
      status: 422,
      code: 'IDEMPOTENCY_CONFLICT',
    });
    expect(await writes.counts()).toEqual({ n: ROWS, d: ROWS });
  });

  it('defect: a record stored before the fingerprint was normalized (its hash of the request as written) conflicted with a resend spelled the other way', async () => {
    // What an earlier version stored: the hash of the parsed request as it was written (`key: "id"`).
    const written = {
      id: 'fp-stored-earlier',
      source: { type: 'file', path: input },
      destination: { type: 'postgres', connection: 'wh', table: 'dst_earlier', key: 'id' },
    };
    const parsed = parseTransferRequest(written);
    const now = Date.now();
    await sql(
      storeDb.url,
      `INSERT INTO transfers (id, request_hash, request, state, epoch, attempts, result, created_at, updated_at)
       VALUES ($1, $2, $3, 'COMPLETED', 1, 1, $4, $5, $5)`,
      [
        written.id,
        hashJson(parsed),
        JSON.stringify(parsed),
        JSON.stringify({ recordsRead: ROWS, recordsWritten: ROWS, badRecords: 0 }),
        now,
      ],
    );
    const stored = { status: 200, what: 'COMPLETED', epoch: 1, attempts: 1 };
    const same = await call(`${node.url}/v1/transfers`, { json: written });
    expect(summary(same)).toEqual(stored);
    const respelled = await call(`${node.url}/v1/transfers`, {
      json: reversedKeys({ ...written, destination: { ...written.destination, key: ['id'] } }),
    });
    expect(summary(respelled)).toEqual(stored);
    const other = await call(`${node.url}/v1/transfers`, {
      json: { ...written, destination: { ...written.destination, table: 'elsewhere' } },
    });
    expect({ status: other.status, code: other.body.code }).toEqual({
      status: 422,
      code: 'IDEMPOTENCY_CONFLICT',
    });
    // Nothing ran and nothing changed: the stored record is as it was.
    const [row] = await sql<{ state: string; epoch: number; request_hash: string }>(
      storeDb.url,
      'SELECT state, epoch, request_hash FROM transfers WHERE id = $1',
      [written.id],
    );
    expect(row).toEqual({ state: 'COMPLETED', epoch: 1, request_hash: hashJson(parsed) });
  });
});
