/**
 * The app-server's control API stopped behind a load balancer (SIGTERM): like the api-servers, it keeps serving
 * while `/readyz` says 503, so the balancer takes it out before it stops answering, and retires keep-alive
 * connections with `Connection: close` on their last answer.
 */
import { Agent, request } from 'node:http';
import { firstNotReady, type HttpAnswer, httpGet, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, startNodeProcess } from './helpers.js';

describe('an app-server stopped behind a load balancer', () => {
  it('defect: a control request sent on a keep-alive connection once SIGTERM turned readiness to 503 was refused or reset instead of served', async () => {
    await using dir = await tempDir('sluice-app-drain-');
    await using node = await startNodeProcess(localNode('h1', dir.path));
    await using agent = Object.assign(new Agent({ keepAlive: true, maxSockets: 1 }), {
      [Symbol.asyncDispose]: async () => agent.destroy(),
    });
    const nodes = `${node.url}/v1/nodes`;
    expect(await httpGet(nodes, agent)).toMatchObject({ status: 200, connection: 'keep-alive' });

    node.child.kill('SIGTERM');
    const notReady = await firstNotReady(node.url);
    expect(typeof notReady === 'string' ? notReady : notReady.status).toBe(503);
    expect(JSON.parse((notReady as HttpAnswer).body)).toMatchObject({
      status: 'not-ready',
      node: 'stopping',
    });
    // Before: 'ECONNRESET' / 'ECONNREFUSED' or 503 NODE_SHUTTING_DOWN (the listener closed at once).
    const after = await httpGet(nodes, agent);
    expect(typeof after === 'string' ? after : after.status).toBe(200);
    expect((after as HttpAnswer).connection).toBe('close');
    const fresh = await httpGet(nodes, false);
    expect(typeof fresh === 'string' ? fresh : fresh.status).toBe(200);

    expect(await node.child.exited, node.child.output()).toEqual({ code: 0, signal: null });
  }, 60_000);

  it('defect: the endpoint stream kept its connection alive, so a console reconnecting after a shutdown reused a connection to the stopping node', async () => {
    await using dir = await tempDir('sluice-app-drain-stream-');
    await using node = await startNodeProcess(localNode('h1', dir.path));
    // The head of the stream, then the connection dropped: the stream ends only when the node stops.
    const connection = await new Promise<string | undefined>((resolve, reject) => {
      const req = request(
        `${node.url}/v1/endpoints/stream`,
        { headers: { accept: 'text/event-stream' } },
        (res) => {
          resolve(res.headers.connection);
          res.destroy();
        },
      );
      req.on('error', reject);
      req.end();
    });
    // Before: 'keep-alive'.
    expect(connection).toBe('close');
  }, 60_000);
});
