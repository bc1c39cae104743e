import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { capturingLogger, freePort } from '@sluice/testkit';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { countingResponder } from '../../test/helpers.js';
import { createDirectBackplane, type DirectBackplane } from './direct-backplane.js';
import { directRoutes } from './plugin.js';

interface HttpNode extends AsyncDisposable {
  url: string;
  requests: string[];
}

/** A real HTTP server answering everything with `handler` (a peer that misbehaves in some way). */
async function httpNode(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<HttpNode> {
  const requests: string[] = [];
  const server: Server = createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    async [Symbol.asyncDispose]() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A node serving the backplane's internal routes the way production does: fastify with the `directRoutes` plugin. */
async function routesNode(backplane: DirectBackplane): Promise<HttpNode> {
  const requests: string[] = [];
  const app = Fastify();
  app.addHook('onRequest', async (request) => void requests.push(`${request.method} ${request.url}`));
  await app.register(directRoutes, { backplane });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    url,
    requests,
    async [Symbol.asyncDispose]() {
      await app.close();
    },
  };
}

const report = (nodeId: string, epoch = 1) => ({
  nodeId,
  address: `http://${nodeId}:7070`,
  epoch,
  progress: { read: 5 },
});

describe('direct-address backplane', () => {
  it('finds the owner over HTTP at its advertised address; another node answers nobody', async () => {
    await using owner = createDirectBackplane({ nodeId: 'owner' });
    await using idle = createDirectBackplane({ nodeId: 'idle' });
    await using asker = createDirectBackplane({ nodeId: 'asker' });
    await using ownerHttp = await routesNode(owner);
    await using idleHttp = await routesNode(idle);
    await using _r = await owner.serve('orders.2026:12', countingResponder(report('owner', 4)));

    expect(await asker.whoRuns('orders.2026:12', { timeoutMs: 1_000, ownerAddress: ownerHttp.url })).toEqual({
      status: 'owner',
      owner: report('owner', 4),
    });
    // A trailing slash in the advertised URL is fine.
    expect(
      (await asker.whoRuns('orders.2026:12', { timeoutMs: 1_000, ownerAddress: `${ownerHttp.url}/` })).status,
    ).toBe('owner');
    expect(await asker.whoRuns('orders.2026:12', { timeoutMs: 1_000, ownerAddress: idleHttp.url })).toEqual({
      status: 'nobody',
    });
    expect(ownerHttp.requests[0]).toBe('GET /v1/internal/transfers/orders.2026%3A12/owner');
    expect(owner.handleOwnerQuery('orders.2026:12')).toEqual(report('owner', 4));
    expect(owner.handleOwnerQuery('other')).toBeNull();
  });

  it('a node that is down (refused) means not running there, answered at once', async () => {
    await using asker = createDirectBackplane({ nodeId: 'asker' });
    const downUrl = `http://127.0.0.1:${await freePort()}`;
    const started = performance.now();
    expect(await asker.whoRuns('t1', { timeoutMs: 2_000, ownerAddress: downUrl })).toEqual({
      status: 'nobody',
    });
    expect(performance.now() - started).toBeLessThan(500);
    expect(await asker.terminate('t1', { timeoutMs: 2_000, ownerAddress: downUrl })).toEqual({
      status: 'not-running',
    });
  });

  it('defect 5: a live owner can be taken over on a false "nobody" — a timeout or a reset is unknown, never nobody', async () => {
    await using asker = createDirectBackplane({ nodeId: 'asker' });

    // Accepts the connection but never answers: reachable and silent (a hung or busy owner).
    await using hung = await httpNode(() => {});
    const hungStart = performance.now();
    const timedOut = await asker.whoRuns('t1', { timeoutMs: 300, ownerAddress: hung.url });
    expect(timedOut).toMatchObject({ status: 'unknown', silent: true });
    expect((timedOut as { reason: string }).reason).toContain('within 300 ms');
    expect(performance.now() - hungStart).toBeGreaterThanOrEqual(290);
    // A terminate that times out may be an owner still stopping: unknown, and silent.
    expect(await asker.terminate('t1', { timeoutMs: 300, ownerAddress: hung.url })).toMatchObject({
      status: 'unknown',
      silent: true,
    });

    // Accepts the connection, then resets it (an owner restarting or shedding load): we cannot tell.
    await using resetting = await httpNode((req) => req.socket.destroy());
    const reset = await asker.whoRuns('t1', { timeoutMs: 2_000, ownerAddress: resetting.url });
    expect(reset.status).toBe('unknown');
    expect('silent' in reset).toBe(false);
    const resetTerminate = await asker.terminate('t1', { timeoutMs: 2_000, ownerAddress: resetting.url });
    expect(resetTerminate.status).toBe('unknown');
    expect('silent' in resetTerminate).toBe(false);
    expect(resetting.requests).toEqual([
      'GET /v1/internal/transfers/t1/owner',
      'POST /v1/internal/transfers/t1/terminate',
    ]);
  });

  it('answers unknown (never nobody) when the owner address fails otherwise or is missing', async () => {
    const logger = capturingLogger();
    await using asker = createDirectBackplane({ nodeId: 'asker', logger });
    await using broken = await httpNode((_req, res) => res.writeHead(500).end('boom'));
    await using garbage = await httpNode((_req, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"nodeId": 3'),
    );
    await using huge = await httpNode((_req, res) => res.writeHead(200).end(`"${'x'.repeat(100_000)}"`));
    for (const url of [broken.url, garbage.url, huge.url]) {
      expect((await asker.whoRuns('t1', { timeoutMs: 1_000, ownerAddress: url })).status).toBe('unknown');
    }
    expect((await asker.whoRuns('t1', { timeoutMs: 1_000 })).status).toBe('unknown');
    expect((await asker.whoRuns('t1', { timeoutMs: 1_000, ownerAddress: 'ftp://x' })).status).toBe('unknown');
    expect(logger.warnings().some((w) => /not JSON/.test(String(w.fields.reason)))).toBe(true);
  });

  it('routes terminate to the owner, which stops exactly once and acknowledges', async () => {
    await using owner = createDirectBackplane({ nodeId: 'owner' });
    await using a = createDirectBackplane({ nodeId: 'a' });
    await using b = createDirectBackplane({ nodeId: 'b' });
    await using ownerHttp = await routesNode(owner);
    const responder = countingResponder(report('owner'), { stopMs: 100 });
    await using _r = await owner.serve('t-term', responder);
    const options = { timeoutMs: 3_000, ownerAddress: ownerHttp.url };
    const answers = await Promise.all([a.terminate('t-term', options), b.terminate('t-term', options)]);
    expect(answers).toEqual([
      { status: 'terminated', by: 'owner' },
      { status: 'terminated', by: 'owner' },
    ]);
    expect(await a.terminate('t-term', options)).toEqual({ status: 'terminated', by: 'owner' });
    expect(responder.terminations).toBe(1);
    expect(ownerHttp.requests.filter((r) => r.startsWith('POST'))).toHaveLength(3);
    expect(await a.terminate('t-other', options)).toEqual({ status: 'not-running' });
  });

  it('the routes plugin answers the wire contract: problems for a bad id and for a transfer not running here', async () => {
    await using owner = createDirectBackplane({ nodeId: 'owner' });
    await using ownerHttp = await routesNode(owner);
    await using _r = await owner.serve('t1', countingResponder(report('owner', 2)));
    const found = await fetch(`${ownerHttp.url}/v1/internal/transfers/t1/owner`);
    expect(found.status).toBe(200);
    expect(await found.json()).toEqual(report('owner', 2));

    const bad = await fetch(`${ownerHttp.url}/v1/internal/transfers/${encodeURIComponent('a b')}/owner`);
    expect(bad.status).toBe(400);
    expect(bad.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await bad.json()).toMatchObject({ code: 'VALIDATION_FAILED' });

    for (const [method, action] of [
      ['GET', 'owner'],
      ['POST', 'terminate'],
    ] as const) {
      const absent = await fetch(`${ownerHttp.url}/v1/internal/transfers/t2/${action}`, { method });
      expect(absent.status).toBe(404);
      expect(absent.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(await absent.json()).toMatchObject({
        code: 'NOT_FOUND',
        detail: 'Transfer "t2" is not running on this node',
        instance: `/v1/internal/transfers/t2/${action}`,
      });
    }
    const stopped = await fetch(`${ownerHttp.url}/v1/internal/transfers/t1/terminate`, { method: 'POST' });
    expect(stopped.status).toBe(200);
    expect(await stopped.json()).toEqual({ terminated: true, by: 'owner' });
    // Only the two routes, each with its one method.
    expect((await fetch(`${ownerHttp.url}/v1/internal/transfers/t1/terminate`)).status).toBe(404);
    expect((await fetch(`${ownerHttp.url}/v1/other`)).status).toBe(404);
  });

  it('events stay in-process: subscribers get each event, the latest redirect per alias is kept', async () => {
    await using bp = createDirectBackplane({ nodeId: 'n' });
    const seen: unknown[] = [];
    await using _s = await bp.subscribe((e) => void seen.push(e), { types: ['AliasRedirected'] });
    const v2 = {
      type: 'AliasRedirected' as const,
      host: 'h1',
      alias: 'items',
      from: 'a',
      to: 'b',
      checkpoint: null,
      version: 2,
      at: 't2',
    };
    const v1 = { ...v2, to: 'a', from: null, version: 1, at: 't1' };
    await bp.publish(v2);
    await bp.publish(v1);
    await bp.publish({ type: 'SnapshottingDone', endpoint: 'items', cache: 'b', source: 's', at: 't' });
    await expect(bp.publish({ type: 'Nope' } as never)).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
    expect(seen).toEqual([v2, v1]);
    expect(await bp.latestAliasEvents()).toEqual([v2]);
    await bp.close();
    expect(bp.status()).toBe('closed');
    expect((await bp.whoRuns('t', { timeoutMs: 10 })).status).toBe('unknown');
  });
});
