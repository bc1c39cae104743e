/**
 * A change feed whose connection goes silent — the api-server stopped (SIGSTOP, a frozen VM) or a network path that
 * drops packets without a reset — must be noticed: the server sends a heartbeat comment every
 * `api.changes.heartbeatMs`, so a connection that delivers nothing for much longer is dead, and the client
 * reconnects and resumes from its token. A consumer that is slow to ask for the next event is not silence.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { createClient } from './client.js';
import type { ChangeEvent } from './endpoint.js';

const LIVE = 'id: t-live\nevent: live\ndata: {"generation":"g1"}\n\n';
const commit = (n: number) => `id: t-${n}\nevent: commit\ndata: {"position":{"s":${n}},"epoch":1}\n\n`;

/** A feed server whose connections are scripted by `script(connection number, response, after)`. */
async function feedServer(script: (n: number, res: ServerResponse, after: string | null) => void) {
  const afters: Array<string | null> = [];
  const open = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    const after = new URL(req.url ?? '/', 'http://x').searchParams.get('after');
    afters.push(after);
    open.add(res);
    res.on('close', () => open.delete(res));
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('retry: 1000\n\n');
    script(afters.length, res, after);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    afters,
    [Symbol.asyncDispose]: async () => {
      for (const res of open) res.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The first `count` events of `feed`, or what arrived when `ms` passed. */
async function take<T>(feed: AsyncGenerator<T>, count: number, ms: number, pause = 0): Promise<T[]> {
  const out: T[] = [];
  const deadline = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), ms).unref());
  while (out.length < count) {
    const next = await Promise.race([feed.next(), deadline]);
    if (next === 'timeout' || next.done) break;
    out.push(next.value);
    if (pause > 0) await new Promise((resolve) => setTimeout(resolve, pause));
  }
  await Promise.race([feed.return(undefined), deadline]);
  return out;
}

describe('change feed: a silent connection', () => {
  it('defect: changes() waited forever on a connection that went silent (a stopped api-server); it now reconnects and resumes from its token', async () => {
    // Connection 1 sends `live`, then nothing ever again (the server process is stopped); connection 2 answers.
    await using server = await feedServer((n, res) => {
      if (n === 1) res.write(LIVE);
      else res.write(commit(n));
    });
    const ep = createClient({ queryUrl: server.url }).endpoint('items');
    const feed = ep.changes({ idleTimeoutMs: 300, backoff: { initialMs: 10, maxMs: 20 } });
    const events = await take(feed, 2, 3_000);
    expect(events.map((e: ChangeEvent<Record<string, unknown>>) => e.type)).toEqual(['live', 'commit']);
    expect(server.afters.slice(0, 2)).toEqual([null, 't-live']);
  });

  it('keeps a connection that sends heartbeats, and one whose consumer is slow, without reconnecting', async () => {
    await using server = await feedServer((_n, res) => {
      // Three events at once, then only heartbeat comments (a reconnect would show as another `live`).
      res.write(`${LIVE}${commit(1)}${commit(2)}`);
      const beat = setInterval(() => res.write(': heartbeat\n\n'), 100);
      res.on('close', () => clearInterval(beat));
    });
    const ep = createClient({ queryUrl: server.url }).endpoint('items');
    // The consumer takes 500 ms per event (longer than the idle timeout): buffered events are no silence.
    const slow = await take(ep.changes({ idleTimeoutMs: 300 }), 3, 5_000, 500);
    expect(slow.map((e) => e.type)).toEqual(['live', 'commit', 'commit']);
    expect(server.afters).toHaveLength(1);
    // Heartbeats alone keep it open past several idle timeouts.
    const heard = await take(ep.changes({ idleTimeoutMs: 300 }), 4, 1_500);
    expect(heard.map((e) => e.type)).toEqual(['live', 'commit', 'commit']);
    expect(server.afters).toHaveLength(2);
  });
});
