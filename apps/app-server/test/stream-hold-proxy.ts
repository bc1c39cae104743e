/**
 * A TCP proxy in front of an app-server that can hold back what the server sends on its endpoint streams
 * (`GET /v1/endpoints/stream`) while every other request passes as it is: how a test keeps a console page's picture
 * stale — the stream still open, so the page still says "Live" — while the operator acts from it, as a slow network
 * or a busy browser tab does between a change on the server and the page seeing it.
 *
 * A connection is a stream once its request line `GET /v1/endpoints/stream` went by (a stream is never followed by
 * another request on its connection). While held, the server's bytes on such connections are kept, in order, and
 * delivered on release; nothing is dropped.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { freePort } from '@sluice/testkit';

interface ProxiedConnection {
  client: Socket;
  upstream: Socket;
  stream: boolean;
  /** The server's bytes read while held, delivered on release. */
  held: Buffer[];
}

export interface StreamHoldProxy extends AsyncDisposable {
  readonly port: number;
  /** The app-server's URL through the proxy (the origin a browser page opened through it talks to). */
  readonly url: string;
  /** From now on nothing more the server sends on an endpoint stream reaches the page — streams opened later too. */
  hold(): void;
  /** Delivers what was held, and lets the streams pass again. */
  release(): void;
  /** How many endpoint streams are open through the proxy. */
  streams(): number;
}

const STREAM_REQUEST = /^GET \/v1\/endpoints\/stream[?\s]/m;

/**
 * Listens on a free port and forwards each connection to the app-server on 127.0.0.1:`targetPort`.
 *
 * @example
 * ```ts
 * await using proxy = await startStreamHoldProxy(node.port);
 * await page.goto(`${proxy.url}/console`);
 * proxy.hold(); // the page's picture stops moving
 * proxy.release();
 * ```
 */
export async function startStreamHoldProxy(targetPort: number): Promise<StreamHoldProxy> {
  const port = await freePort();
  const connections = new Set<ProxiedConnection>();
  let holding = false;

  const server: Server = createServer((client) => {
    const upstream = connect({ port: targetPort, host: '127.0.0.1' });
    const c: ProxiedConnection = { client, upstream, stream: false, held: [] };
    connections.add(c);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      connections.delete(c);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.on('data', (chunk: Buffer) => {
      if (!c.stream && STREAM_REQUEST.test(chunk.toString('latin1'))) c.stream = true;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (c.stream && holding) c.held.push(chunk);
      else client.write(chunk);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });

  return {
    port,
    url: `http://127.0.0.1:${port}`,
    hold: () => {
      holding = true;
    },
    release: () => {
      holding = false;
      for (const c of connections) {
        for (const chunk of c.held.splice(0)) c.client.write(chunk);
      }
    },
    streams: () => [...connections].filter((c) => c.stream && !c.client.destroyed).length,
    [Symbol.asyncDispose]: async () => {
      for (const c of connections) {
        c.client.destroy();
        c.upstream.destroy();
      }
      connections.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
