/**
 * What a load balancer's client gets from an api-server told to stop (SIGTERM): the balancer only takes a backend out
 * once its `/readyz` answers 503, so the server must keep serving for a while after saying so (the drain delay), and
 * retire keep-alive connections with `Connection: close` on their last answer rather than drop them.
 */
import { Agent } from 'node:http';
import { firstNotReady, type HttpAnswer, httpGet, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { spawnApiServer, writeConfig, writeGeneration } from './helpers.js';
import { SseConnection } from './sse.js';

describe('an api-server stopped behind a load balancer', () => {
  it('defect: a request sent on a keep-alive connection once SIGTERM turned readiness to 503 was refused or reset instead of served', async () => {
    await using dir = await tempDir('sluice-api-drain-');
    await writeGeneration(dir.path, 1, 20);
    const config = await writeConfig(dir.path, { dataDir: dir.path, logLevel: 'info' });
    const api = await spawnApiServer(config);
    await using _stop = api;
    await using agent = Object.assign(new Agent({ keepAlive: true, maxSockets: 1 }), {
      [Symbol.asyncDispose]: async () => agent.destroy(),
    });
    const lookup = `${api.url}/v1/endpoints/items/records/3`;
    const before = await httpGet(lookup, agent);
    expect(before).toMatchObject({ status: 200, connection: 'keep-alive' });

    api.child.kill('SIGTERM');
    // What the balancer's health check sees first: readiness withdrawn, the server still answering.
    const notReady = await firstNotReady(api.url);
    expect(typeof notReady === 'string' ? notReady : notReady.status).toBe(503);
    expect(JSON.parse((notReady as HttpAnswer).body)).toMatchObject({ status: 'stopping' });
    // The balancer has not noticed yet: a client's next request on its kept-alive connection is served, and told
    // to close that connection (its next one goes through the balancer to a backend that is still ready).
    // Before: 'ECONNRESET' / 'ECONNREFUSED' (the idle connection closed at once) or 503 NODE_SHUTTING_DOWN.
    const after = await httpGet(lookup, agent);
    expect(typeof after === 'string' ? after : after.status).toBe(200);
    expect((after as HttpAnswer).connection).toBe('close');
    // A new connection during the drain is served too (the balancer may still route one here).
    const fresh = await httpGet(lookup, false);
    expect(typeof fresh === 'string' ? fresh : fresh.status).toBe(200);

    expect(await api.child.exited, api.child.output()).toEqual({ code: 0, signal: null });
  }, 60_000);

  it('defect: a change feed ended at shutdown left its keep-alive connection to be reused, so the resume went back to the stopping server', async () => {
    await using dir = await tempDir('sluice-api-drain-feed-');
    await writeGeneration(dir.path, 1, 20);
    const config = await writeConfig(dir.path, { dataDir: dir.path, logLevel: 'info' });
    const api = await spawnApiServer(config);
    await using _stop = api;
    const feed = await SseConnection.open(`${api.url}/v1/endpoints/items/changes?snapshot=true`);
    await feed.waitForEvent((event) => event.event === 'live');
    // A feed ends only when the server ends it (a shutdown): its connection must close with it, or a client's
    // pool reuses it for the resume — behind a TCP balancer, a connection to the server that is stopping.
    // Before: 'keep-alive'.
    expect(feed.res.headers.connection).toBe('close');
    api.child.kill('SIGTERM');
    await waitFor(() => feed.closed, { timeoutMs: 20_000, what: 'the feed to end' });
    expect(feed.lastId).toBeDefined();
    expect(await api.child.exited, api.child.output()).toEqual({ code: 0, signal: null });
  }, 60_000);
});
