/**
 * A TCP proxy in front of PostgreSQL that can hold back the stream of one replication slot while every other
 * connection — the other slot's stream, snapshots, probes — passes as it is: how a test keeps one generation (a green
 * being built or held) from catching up while the serving one goes on following its own slot.
 *
 * A stream is told apart by its `START_REPLICATION SLOT "<name>"` command (sent in clear on a local, non-TLS
 * connection). While its slot is held, nothing more the walsender sends reaches the app-server: the proxy stops
 * reading the server's side (the walsender blocks on its full socket, as behind a congested network), while what the
 * app-server sends — its status updates, which keep `wal_sender_timeout` from ending the stream — still passes.
 * Released, what was held is delivered in order and the stream catches up. Nothing is dropped or reordered, so the
 * generation ends up exactly as if its network had been slow.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { freePort } from '@sluice/testkit';

/** What a proxied connection is: the slot it streams once its `START_REPLICATION` went by. */
interface ProxiedConnection {
  client: Socket;
  upstream: Socket;
  slot: string | null;
  /** The client's bytes so far, until the slot is known (a replication command comes within the first few KB). */
  seen: string;
  /** The server's bytes read while its slot was held, delivered on release. */
  held: Buffer[];
}

export interface SlotHoldProxy extends AsyncDisposable {
  readonly port: number;
  /** `url` (of the server behind the proxy) through the proxy. */
  route(url: string): string;
  /** From now on nothing more the server sends on `slot`'s stream reaches the client — streams started later too. */
  hold(slot: string): void;
  /** Delivers what was held of `slot`'s streams, and lets them pass again. */
  release(slot: string): void;
  /** How many connections stream `slot` now. */
  streams(slot: string): number;
}

const START_REPLICATION = /START_REPLICATION SLOT "([^"]+)"/;
const SEEN_LIMIT = 64 * 1024;

/**
 * Listens on a free port and forwards each connection to PostgreSQL on 127.0.0.1:`targetPort`.
 *
 * @example
 * ```ts
 * await using proxy = await startSlotHoldProxy(postgres.port);
 * // the endpoint's connection: proxy.route(url); the writer writes to `url` directly
 * proxy.hold('sluice_h1_items_source_b'); // the green stops catching up
 * proxy.release('sluice_h1_items_source_b');
 * ```
 */
export async function startSlotHoldProxy(targetPort: number): Promise<SlotHoldProxy> {
  const port = await freePort();
  const connections = new Set<ProxiedConnection>();
  const heldSlots = new Set<string>();

  const isHeld = (c: ProxiedConnection) => c.slot !== null && heldSlots.has(c.slot);

  const server: Server = createServer((client) => {
    const upstream = connect({ port: targetPort, host: '127.0.0.1' });
    const c: ProxiedConnection = { client, upstream, slot: null, seen: '', held: [] };
    connections.add(c);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      connections.delete(c);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.on('data', (chunk: Buffer) => {
      if (c.slot === null && c.seen.length < SEEN_LIMIT) {
        c.seen += chunk.toString('latin1');
        const started = START_REPLICATION.exec(c.seen);
        if (started !== null) {
          c.slot = started[1]!;
          c.seen = '';
        }
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!isHeld(c)) {
        client.write(chunk);
        return;
      }
      // Held: keep this chunk and stop reading, so the walsender, not this process, holds the rest.
      c.held.push(chunk);
      upstream.pause();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });

  return {
    port,
    route(url) {
      const routed = new URL(url);
      routed.hostname = '127.0.0.1';
      routed.port = String(port);
      return routed.toString();
    },
    hold(slot) {
      heldSlots.add(slot);
    },
    release(slot) {
      heldSlots.delete(slot);
      for (const c of connections) {
        if (c.slot !== slot) continue;
        for (const chunk of c.held) c.client.write(chunk);
        c.held = [];
        c.upstream.resume();
      }
    },
    streams: (slot) => [...connections].filter((c) => c.slot === slot).length,
    async [Symbol.asyncDispose]() {
      heldSlots.clear();
      for (const c of connections) {
        c.client.destroy();
        c.upstream.destroy();
      }
      connections.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
