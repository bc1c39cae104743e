import { connect, createServer, type Server, type Socket } from 'node:net';
import { httpGet } from './http-answer.js';
import { freePort } from './ports.js';

/** A {@link startBalancer} in front of backends on 127.0.0.1. */
export interface Balancer extends AsyncDisposable {
  readonly port: number;
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  /** The backend ports whose last health check answered 200: the ones new connections go to. */
  healthy(): number[];
  /** Client connections refused because no backend was healthy (each closed at once). */
  readonly refused: number;
}

/**
 * A round-robin TCP load balancer as HAProxy in TCP mode or a Kubernetes Service runs one: polls `GET /readyz` of
 * every backend every `checkMs` on a new connection, and sends each new client connection to the next backend whose
 * last check answered 200; a client connection stays on its backend for its life (keep-alive included), so only the
 * server closing it (`Connection: close`) moves that client elsewhere. One side's close closes the other (once what
 * it sent is written), an error resets it.
 *
 * @example
 * ```ts
 * await using lb = await startBalancer([portA, portB], { checkMs: 100 });
 * await waitFor(() => lb.healthy().length === 2);
 * await fetch(`${lb.url}/v1/endpoints`);
 * ```
 */
export async function startBalancer(
  backendPorts: readonly number[],
  options: { checkMs: number },
): Promise<Balancer> {
  const port = await freePort();
  const healthy = new Set<number>();
  const sockets = new Set<Socket>();
  let refused = 0;
  let next = 0;
  let stopped = false;

  const check = async (backend: number): Promise<void> => {
    while (!stopped) {
      const answer = await httpGet(`http://127.0.0.1:${backend}/readyz`, false);
      if (typeof answer !== 'string' && answer.status === 200) healthy.add(backend);
      else healthy.delete(backend);
      await new Promise((resolve) => setTimeout(resolve, options.checkMs));
    }
  };
  const checks = backendPorts.map((backend) => check(backend));

  const pick = (): number | undefined => {
    const ready = backendPorts.filter((backend) => healthy.has(backend));
    if (ready.length === 0) return undefined;
    next = (next + 1) % ready.length;
    return ready[next];
  };

  const server: Server = createServer((client) => {
    const backend = pick();
    if (backend === undefined) {
      refused += 1;
      client.destroy();
      return;
    }
    const upstream = connect({ port: backend, host: '127.0.0.1' });
    sockets.add(client).add(upstream);
    client.on('close', () => sockets.delete(client));
    upstream.on('close', () => sockets.delete(upstream));
    // An error is passed on as a reset. A side that closed closes the other once what it sent is written, as a
    // proxy does: a half-open client connection would take requests that nothing forwards any more.
    client.on('error', () => upstream.destroy()).on('close', () => upstream.end(() => upstream.destroy()));
    upstream.on('error', () => client.destroy()).on('close', () => client.end(() => client.destroy()));
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });

  return {
    port,
    url: `http://127.0.0.1:${port}`,
    healthy: () => backendPorts.filter((backend) => healthy.has(backend)),
    get refused() {
      return refused;
    },
    [Symbol.asyncDispose]: async () => {
      stopped = true;
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.all(checks);
    },
  };
}
