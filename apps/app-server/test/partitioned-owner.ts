/**
 * Two app-servers on one PostgreSQL store and a private nats-server, the first (the owner of what the test submits)
 * reaching NATS through a TCP proxy the test can cut: a partition between the owner and the backplane while both
 * nodes keep the store (test/nats-partition.test.ts has the same setup for other questions).
 */
import { join } from 'node:path';
import { type NatsServerHandle, startNatsServer, startTcpProxy, type TcpProxy } from '@sluice/testkit';
import { FAST_TRANSFERS, type NodeProcess, startNodeProcess } from './helpers.js';

export interface PartitionedPair extends AsyncDisposable {
  readonly nats: NatsServerHandle;
  /** Between `owner` and NATS: `proxy.cut()` partitions it. */
  readonly proxy: TcpProxy;
  /** Node `n1`, on NATS through the proxy. */
  readonly owner: NodeProcess;
  /** Node `n2`, on NATS directly. */
  readonly other: NodeProcess;
  /** The one file root of both nodes. */
  readonly files: string;
}

/**
 * Starts the pair under `dir` on `storeUrl`. No sweeper runs within a test's time: only what the test does moves a
 * record to another owner. Dispose kills both nodes (SIGKILL), then the proxy and the nats-server.
 *
 * @example
 * ```ts
 * await using pair = await startPartitionedPair(dir.path, storeDb.url);
 * await call(`${pair.owner.url}/v1/transfers`, { json: body });
 * await pair.proxy.cut();
 * ```
 */
export async function startPartitionedPair(dir: string, storeUrl: string): Promise<PartitionedPair> {
  const nats = await startNatsServer();
  /** What to stop on dispose, in reverse order of start. */
  const stops: (() => PromiseLike<unknown>)[] = [() => nats[Symbol.asyncDispose]()];
  const dispose = async () => {
    for (const stop of stops.reverse()) await Promise.resolve(stop()).catch(() => {});
  };
  try {
    const proxy = await startTcpProxy(nats.port);
    stops.push(() => proxy[Symbol.asyncDispose]());
    const files = join(dir, 'files');
    const spec = (nodeId: string, natsUrl: string) => ({
      nodeId,
      dir: join(dir, nodeId),
      store: storeUrl,
      nats: natsUrl,
      roots: [files],
      transfers: { ...FAST_TRANSFERS, sweepIntervalMs: 600_000 },
    });
    const owner = await startNodeProcess(spec('n1', proxy.url));
    stops.push(() => owner.child.stop('SIGKILL'));
    const other = await startNodeProcess(spec('n2', nats.url));
    stops.push(() => other.child.stop('SIGKILL'));
    return { nats, proxy, owner, other, files, [Symbol.asyncDispose]: dispose };
  } catch (err) {
    await dispose();
    throw err;
  }
}
