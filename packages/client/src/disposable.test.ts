/**
 * Every async generator the client hands out ends with `await using` on runtimes whose generators lack
 * `Symbol.asyncDispose` (Node 20): a stream's connection closes at the block's end. A local SSE server stands in for
 * the app-server here (the change feed against a real api-server: test/packed.test.ts).
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { createClient } from './client.js';

/** Answers every request with one SSE event (or one query page) and keeps SSE connections open; counts them. */
async function sseServer() {
  const open = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    if (req.method === 'POST') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ records: [{ id: 1 }, { id: 2 }], next: null }));
      return;
    }
    open.add(res);
    res.on('close', () => open.delete(res));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('event: endpoints\ndata: {"endpoints":[]}\n\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    open,
    [Symbol.asyncDispose]: async () => {
      for (const res of open) res.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const disposeOf = (value: object) => (value as Record<symbol, unknown>)[Symbol.asyncDispose];

describe('await using on the client generators', () => {
  it('defect: watchEndpoints() and scan() had no Symbol.asyncDispose on Node 20 (await using threw "Object not disposable.")', async () => {
    await using server = await sseServer();
    const client = createClient({ controlUrl: server.url, queryUrl: server.url });

    const stream = client.control.watchEndpoints();
    expect(typeof disposeOf(stream)).toBe('function');
    expect((await stream.next()).value).toEqual({ type: 'endpoints', endpoints: [] });
    expect(server.open.size).toBe(1);
    await (disposeOf(stream) as () => Promise<void>).call(stream);
    // The client aborted its request: the server sees the connection close.
    await new Promise<void>((resolve) => {
      const check = () => (server.open.size === 0 ? resolve() : setTimeout(check, 10));
      check();
    });
    expect(await stream.next()).toEqual({ value: undefined, done: true });

    const rows = client.endpoint<{ id: number }>('items').scan();
    expect(typeof disposeOf(rows)).toBe('function');
    expect((await rows.next()).value).toEqual({ id: 1 });
    await (disposeOf(rows) as () => Promise<void>).call(rows);
    expect(await rows.next()).toEqual({ value: undefined, done: true });
  });
});
