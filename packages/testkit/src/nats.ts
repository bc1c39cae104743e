import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, portOpen } from './ports.js';
import { type ChildHandle, spawnProcess } from './process.js';
import { sleep } from './wait.js';

const CANDIDATES = ['/usr/sbin/nats-server', '/usr/bin/nats-server', '/usr/local/bin/nats-server'];

/** Locates the nats-server binary (`SLUICE_TEST_NATS_BIN` overrides); throws a clear error when missing. */
export function natsServerBinary(): string {
  const configured = process.env.SLUICE_TEST_NATS_BIN;
  if (configured) return configured;
  const found = CANDIDATES.find((candidate) => existsSync(candidate));
  if (!found) {
    throw new Error(
      `nats-server not found (looked in ${CANDIDATES.join(', ')}); install it (apt-get install nats-server) or set SLUICE_TEST_NATS_BIN`,
    );
  }
  return found;
}

export interface NatsServerHandle extends AsyncDisposable {
  readonly url: string;
  readonly port: number;
  /** Stops gracefully (SIGTERM) and waits. */
  stop(): Promise<void>;
  /** SIGKILL. */
  kill(): Promise<void>;
  /** Starts again on the same port with the same JetStream directory. */
  start(): Promise<void>;
  /** Stop then start. */
  restart(): Promise<void>;
  /**
   * SIGSTOP: the server hangs with every connection left open — clients still count themselves connected (a hung
   * server or a partition without resets), unlike `stop`, whose closed sockets they notice at once.
   */
  pause(): void;
  /** SIGCONT after {@link pause}. */
  resume(): void;
  /**
   * Reloads the configuration file (SIGHUP) — permissions, for one — and resolves once the server says it did.
   * Only for a server started with `-c <file>` in `args`.
   */
  reload(): Promise<void>;
  readonly running: boolean;
  readonly storeDir: string;
}

async function waitForPort(port: number, open: boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if ((await portOpen(port)) === open) return;
    await sleep(25);
  }
  throw new Error(
    `nats-server port ${port} did not become ${open ? 'open' : 'closed'} within ${timeoutMs} ms`,
  );
}

/**
 * Spawns a private `nats-server` with JetStream on a free port and a temp store dir. It can be stopped,
 * killed and restarted on the same port; dispose kills it and removes the dir.
 *
 * @example
 * ```ts
 * await using nats = await startNatsServer();
 * const nc = await connect({ servers: nats.url });
 * ```
 */
export async function startNatsServer(
  options: { jetstream?: boolean; args?: string[] } = {},
): Promise<NatsServerHandle> {
  const binary = natsServerBinary();
  const port = await freePort();
  const storeDir = await mkdtemp(join(tmpdir(), 'sluice-nats-'));
  let child: ChildHandle | null = null;

  const start = async () => {
    if (child) return;
    const args = ['-a', '127.0.0.1', '-p', String(port)];
    if (options.jetstream !== false) args.push('-js', '-sd', storeDir);
    child = spawnProcess(binary, [...args, ...(options.args ?? [])]);
    const current = child;
    void current.exited.then(() => {
      if (child === current) child = null;
    });
    try {
      await waitForPort(port, true, 10_000);
    } catch (err) {
      throw new Error(`${(err as Error).message}; nats-server output:\n${current.output()}`);
    }
  };
  const halt = async (signal: NodeJS.Signals) => {
    const current = child;
    if (!current) return;
    const stopping = current.stop(signal, 5_000);
    // A paused server acts on the signal only once it runs again (harmless to one that runs).
    current.kill('SIGCONT');
    await stopping;
    child = null;
    await waitForPort(port, false, 5_000);
  };

  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    get running() {
      return child !== null;
    },
    stop: () => halt('SIGTERM'),
    kill: () => halt('SIGKILL'),
    start,
    async restart() {
      await halt('SIGTERM');
      await start();
    },
    pause() {
      if (!child) throw new Error('nats-server is not running: nothing to pause');
      child.kill('SIGSTOP');
    },
    resume() {
      child?.kill('SIGCONT');
    },
    async reload() {
      const current = child;
      if (!current) throw new Error('nats-server is not running: nothing to reload');
      const reloaded = (line: string) => /Reloaded server configuration/.test(line);
      const before = current.lines.filter(reloaded).length;
      current.kill('SIGHUP');
      const deadline = Date.now() + 10_000;
      while (current.lines.filter(reloaded).length === before) {
        if (Date.now() > deadline)
          throw new Error(`nats-server did not reload its configuration; output:\n${current.output()}`);
        await sleep(25);
      }
    },
    async [Symbol.asyncDispose]() {
      await halt('SIGKILL');
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}
