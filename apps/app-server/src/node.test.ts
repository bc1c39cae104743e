import { join } from 'node:path';
import { resolveConfig } from '@sluice/core';
import { signJwt, tempDir } from '@sluice/testkit';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { startNode } from './node.js';

const TOKEN = 'a-static-control-token-0123456789';
const SECRET = 'a-jwt-secret-of-sufficient-length';

describe('startNode (in process)', () => {
  it('requires a bearer token (listed or HS256 JWT) on every route but the probes', async () => {
    await using dir = await tempDir();
    const config = resolveConfig({
      node: { id: 'auth1', port: 0 },
      store: `sqlite:${join(dir.path, 'store.db')}`,
      dataDir: join(dir.path, 'data'),
      control: { auth: { tokens: [TOKEN], jwtSecret: SECRET } },
    });
    await using node = await startNode(config, { logger: pino({ level: 'silent' }), cwd: dir.path });
    const get = (path: string, authorization?: string) =>
      fetch(`${node.url}${path}`, { headers: authorization ? { authorization } : {} });

    expect((await get('/healthz')).status).toBe(200);
    expect((await get('/readyz')).status).toBe(200);
    for (const path of ['/v1/transfers', '/v1/nodes', '/v1/endpoints', '/metrics', '/openapi.json']) {
      const denied = await get(path);
      expect(denied.status, path).toBe(401);
      expect(denied.headers.get('www-authenticate')).toBe('Bearer');
      expect(denied.headers.get('content-type')).toMatch(/application\/problem\+json/);
      expect(((await denied.json()) as { code: string }).code).toBe('UNAUTHORIZED');
    }
    expect((await get('/v1/transfers', `Bearer ${TOKEN}`)).status).toBe(200);
    expect((await get('/v1/transfers', `Bearer ${TOKEN}x`)).status).toBe(401);
    expect((await get('/v1/transfers', TOKEN)).status).toBe(401);
    const jwt = signJwt(SECRET, { sub: 'ops', exp: Math.floor(Date.now() / 1000) + 60 });
    expect((await get('/v1/nodes', `Bearer ${jwt}`)).status).toBe(200);
    const forged = signJwt('another-secret-of-some-length', { sub: 'ops' });
    expect((await get('/v1/nodes', `Bearer ${forged}`)).status).toBe(401);
    const expired = signJwt(SECRET, { sub: 'ops', exp: Math.floor(Date.now() / 1000) - 60 });
    expect((await get('/v1/nodes', `Bearer ${expired}`)).status).toBe(401);
    const none = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${Buffer.from('{"sub":"x"}').toString('base64url')}.`;
    expect((await get('/v1/nodes', `Bearer ${none}`)).status).toBe(401);
  });

  it('releases what it owns on close so another node can take it over at once', async () => {
    await using dir = await tempDir();
    const config = resolveConfig({
      node: { id: 'solo', port: 0 },
      store: `sqlite:${join(dir.path, 'store.db')}`,
      dataDir: join(dir.path, 'data'),
      files: { roots: [dir.path] },
      transfers: { leaseMs: 60_000, heartbeatMs: 1_000 },
    });
    const lines = Array.from({ length: 2_000 }, (_, i) => JSON.stringify({ id: i + 1 })).join('\n');
    const { writeFile } = await import('node:fs/promises');
    await writeFile(join(dir.path, 'in.jsonl'), `${lines}\n`);
    const node = await startNode(config, { logger: pino({ level: 'silent' }), cwd: dir.path });
    const submitted = await fetch(`${node.url}/v1/transfers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        id: 'handback-1',
        source: { type: 'file', path: 'in.jsonl' },
        destination: { type: 'file', path: 'out.jsonl' },
        options: { maxRecordsPerSecond: 200 },
      }),
    });
    expect(submitted.status).toBe(201);
    await node.close();
    const { openStore } = await import('@sluice/store');
    await using store = await openStore(config.store);
    const record = await store.get('handback-1');
    expect(record?.state).toBe('IN_PROGRESS');
    // The lease was 60 s; handback expired it, so any node may recover it now.
    expect(record!.leaseExpiresAt!.getTime()).toBeLessThanOrEqual(Date.now());
    const recovered = await store.recoverExpired(
      { nodeId: 'other', address: 'http://127.0.0.1:1', instanceId: 'i2' },
      10_000,
      10,
    );
    expect(recovered.map((r) => r.id)).toEqual(['handback-1']);
  });

  it('answers a submit once the node is handing its transfers back with 503 NODE_SHUTTING_DOWN, writing nothing', async () => {
    await using dir = await tempDir();
    const { writeFile } = await import('node:fs/promises');
    await writeFile(join(dir.path, 'in.jsonl'), '{"id":1}\n');
    const config = resolveConfig({
      node: { id: 'leaving', port: 0 },
      store: `sqlite:${join(dir.path, 'store.db')}`,
      dataDir: join(dir.path, 'data'),
      files: { roots: [dir.path] },
    });
    await using node = await startNode(config, { logger: pino({ level: 'silent' }), cwd: dir.path });
    // The first step of close(): from here on the node takes no new work, while the store is still up.
    await node.coordinator.shutdown();
    const refused = await fetch(`${node.url}/v1/transfers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        id: 'too-late',
        source: { type: 'file', path: 'in.jsonl' },
        destination: { type: 'file', path: 'out.jsonl' },
      }),
    });
    expect(refused.status).toBe(503);
    expect(refused.headers.get('content-type')).toMatch(/application\/problem\+json/);
    expect(await refused.json()).toEqual({
      type: 'https://sluice.dev/problems/node-shutting-down',
      title: 'Service Unavailable',
      status: 503,
      detail: 'This node is shutting down; send the request to another node',
      code: 'NODE_SHUTTING_DOWN',
      instance: '/v1/transfers',
    });
    // Not the store's fault: the store still answers, and the refused transfer was never written.
    expect((await fetch(`${node.url}/v1/transfers/too-late`)).status).toBe(404);
  });

  it('purges finished transfers past retention.transferDays', async () => {
    await using dir = await tempDir();
    const { writeFile } = await import('node:fs/promises');
    await writeFile(join(dir.path, 'in.jsonl'), '{"id":1}\n{"id":2}\n');
    const config = resolveConfig({
      node: { id: 'purger', port: 0 },
      store: `sqlite:${join(dir.path, 'store.db')}`,
      dataDir: join(dir.path, 'data'),
      files: { roots: [dir.path] },
      retention: { transferDays: 1 / 86_400 },
    });
    const logger = pino({ level: 'silent' });
    const first = await startNode(config, { logger, cwd: dir.path });
    const submitted = await fetch(`${first.url}/v1/transfers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        id: 'short-lived',
        source: { type: 'file', path: 'in.jsonl' },
        destination: { type: 'file', path: 'out.jsonl' },
      }),
    });
    expect(submitted.status).toBe(201);
    const { waitFor } = await import('@sluice/testkit');
    await waitFor(async () => {
      const reply = await fetch(`${first.url}/v1/transfers/short-lived`);
      return ((await reply.json()) as { state: string }).state === 'COMPLETED';
    });
    await first.close();
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    await using second = await startNode(config, { logger, cwd: dir.path });
    await waitFor(async () => (await fetch(`${second.url}/v1/transfers/short-lived`)).status === 404, {
      what: 'the finished transfer to be purged',
    });
  });
});
