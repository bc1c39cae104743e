import { connect, createServer } from 'node:net';

/**
 * Ports handed out for tests to listen on come from below Linux's ephemeral range (32768–60999): a port the OS
 * picks for an outgoing connection (to PostgreSQL, NATS, another server) can never take one between the check
 * here and the server's own listen.
 */
const LOW = 20_000;
const HIGH = 32_000;

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

function osAssignedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Whether something accepts TCP connections on 127.0.0.1:`port` now (a server under test is up, or gone).
 *
 * @example
 * ```ts
 * expect(await portOpen(nats.port)).toBe(true);
 * ```
 */
export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * A free TCP port on 127.0.0.1 for a server under test (below the ephemeral range; the OS's pick as a last resort).
 *
 * @example
 * ```ts
 * const port = await freePort();
 * ```
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = LOW + Math.floor(Math.random() * (HIGH - LOW));
    if (await canListen(port)) return port;
  }
  return osAssignedPort();
}

/**
 * A base port such that `base + offset` is free for every offset (the cluster example derives its five ports
 * from one base).
 *
 * @example
 * ```ts
 * const base = await freeBasePort([1, 2, 3, 81, 82]);
 * ```
 */
export async function freeBasePort(offsets: number[]): Promise<number> {
  const span = Math.max(0, ...offsets);
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = LOW + Math.floor(Math.random() * (HIGH - LOW - span));
    const free = await Promise.all(offsets.map((offset) => canListen(base + offset)));
    if (free.every(Boolean)) return base;
  }
  throw new Error(`no base port found with ${offsets.join(', ')} free after 50 attempts`);
}
