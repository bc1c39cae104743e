import { connect, createServer, type Server, type Socket } from 'node:net';
import { freePort } from './ports.js';

/**
 * A TCP proxy in front of a server, to cut one client's network path while the server and other clients carry on
 * (a real partition: the client sees its socket die and its reconnects refused until `restore()`).
 */
export interface TcpProxy extends AsyncDisposable {
  readonly port: number;
  readonly url: string;
  cut(): Promise<void>;
  restore(): Promise<void>;
}

/**
 * Listens on a free port and forwards every connection to `targetPort` on 127.0.0.1. `cut()` drops the connections
 * and stops listening (the client's reconnects are refused); `restore()` listens again on the same port; dispose
 * cuts.
 *
 * @example
 * ```ts
 * await using proxy = await startTcpProxy(nats.port);
 * // point one process at proxy.url, the others at nats.url
 * await proxy.cut(); // only that process is partitioned
 * await proxy.restore();
 * ```
 */
export async function startTcpProxy(targetPort: number, scheme = 'nats'): Promise<TcpProxy> {
  const port = await freePort();
  const sockets = new Set<Socket>();
  let server: Server | null = null;

  const listen = () =>
    new Promise<void>((resolve, reject) => {
      const s = createServer((client) => {
        const upstream = connect({ port: targetPort, host: '127.0.0.1' });
        sockets.add(client);
        sockets.add(upstream);
        const drop = () => {
          client.destroy();
          upstream.destroy();
          sockets.delete(client);
          sockets.delete(upstream);
        };
        client.on('error', drop).on('close', drop);
        upstream.on('error', drop).on('close', drop);
        client.pipe(upstream);
        upstream.pipe(client);
      });
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => {
        server = s;
        resolve();
      });
    });

  const cut = async () => {
    const current = server;
    server = null;
    for (const socket of sockets) socket.destroy();
    sockets.clear();
    if (current) await new Promise<void>((resolve) => current.close(() => resolve()));
  };

  await listen();
  return {
    port,
    url: `${scheme}://127.0.0.1:${port}`,
    cut,
    restore: listen,
    [Symbol.asyncDispose]: cut,
  };
}
