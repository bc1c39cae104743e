import { createServer } from 'node:net';

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
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
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 30_000);
    const free = await Promise.all(offsets.map((offset) => canListen(base + offset)));
    if (free.every(Boolean)) return base;
  }
  throw new Error(`no base port found with ${offsets.join(', ')} free after 50 attempts`);
}
