/**
 * A request in flight when the api-server starts shutting down is answered — with its page, or with the problem
 * it is — never cut off with no response at all.
 */
import { connect } from 'node:net';
import { openStalledUpload, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { spawnApiServer, startQuietApiServer, writeConfig, writeGeneration } from './helpers.js';

/** Sends a query whose body arrives in two parts, `between()` running in the gap; resolves with the raw reply. */
async function splitQuery(port: number, body: string, between: () => void): Promise<string> {
  const socket = connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  let reply = '';
  socket.on('data', (chunk: Buffer) => {
    reply += chunk.toString('utf8');
  });
  const ended = new Promise<void>((resolve) => {
    socket.once('close', () => resolve());
    socket.once('error', () => resolve());
  });
  socket.write(
    `POST /v1/endpoints/items/query HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body.slice(0, 5)}`,
  );
  await new Promise((resolve) => setTimeout(resolve, 200));
  between();
  await new Promise((resolve) => setTimeout(resolve, 300));
  socket.end(body.slice(5));
  await ended;
  return reply;
}

describe('requests in flight at shutdown', () => {
  it('defect: a query whose answer is a problem got no response at all when shutdown began while its body arrived', async () => {
    await using dir = await tempDir('sluice-api-shutdown-');
    await writeGeneration(dir.path, 1, 20);
    for (const [body, status] of [
      ['{"$limit":100000}', 400], // a problem: handed to fastify, which was closing
      ['{"$limit":5}', 200], // a page: answered by the fast route itself
    ] as const) {
      const server = await startQuietApiServer(dir.path);
      let closing: Promise<void> | null = null;
      const reply = await splitQuery(server.port, body, () => {
        closing = server.close();
      });
      await closing;
      // Before: '' for the problem (the connection was destroyed when fastify's inject refused to run).
      expect(reply.split('\r\n')[0], body).toBe(
        `HTTP/1.1 ${status} ${status === 200 ? 'OK' : 'Bad Request'}`,
      );
      if (status === 400) expect(reply).toContain('"code":"INVALID_QUERY"');
    }
  });
});

describe('a refused upload at shutdown', () => {
  it('defect: a refused upload whose client never sent the rest of its body held the shutdown until the discard gave up (10 s)', async () => {
    await using dir = await tempDir('sluice-api-shutdown-stalled-');
    const config = await writeConfig(dir.path, { dataDir: dir.path, http: { bodyBytes: 16_384 } });
    const api = await spawnApiServer(config);
    await using _stop = api;
    // Declares 100,000 bytes, sends 11, and never sends the rest: answered 413 at once, the connection kept open to
    // read the rest of the body (so the answer is not reset away) — the answer is out, the request is over.
    await using upload = await openStalledUpload(Number(new URL(api.url).port), {
      path: '/v1/endpoints/items/query',
      declaredBytes: 100_000,
      sent: '{"$limit":1',
    });
    expect(upload.status).toBe(413);
    expect(upload.closed).toBe(false);

    api.child.kill('SIGTERM');
    const exit = await api.child.exited;
    expect(exit, api.child.output()).toEqual({ code: 0, signal: null });
    // The server closed the connection itself (the client never ended it) …
    await upload.serverClosed;
    // … at shutdown, not when the discard gave up on the rest of the body (which logs this line).
    expect(api.child.lines.filter((line) => line.includes('rest of a refused body'))).toEqual([]);
    expect(api.child.output()).toContain('api-server stopped');
  }, 60_000);
});
