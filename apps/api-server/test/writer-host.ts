import { createNatsBackplane, type NatsBackplane } from '@sluice/backplane';
import { type CacheManager, openCacheManager } from '@sluice/cache';
import { type TempDir, tempDir } from '@sluice/testkit';

/**
 * This process in the place of one host's app-server: a dataDir of its own, the cache manager that builds the
 * generations there and a NATS backplane that publishes their `AliasRedirected` as `nodeId`. Disposing it closes
 * the publisher and the manager, then removes the dataDir.
 */
export interface WriterHost extends AsyncDisposable {
  readonly dir: TempDir;
  readonly manager: CacheManager;
  readonly publisher: NatsBackplane;
}

/**
 * Starts a {@link WriterHost} on the nats-server at `natsUrl`. Replaced generations are kept an hour
 * (`gcGraceMs`), so a test can still read the generation its api-servers switched away from.
 *
 * @example
 * ```ts
 * await using host = await startWriterHost(nats.url, { prefix: 'sluice-host-a-', nodeId: 'app-a' });
 * await buildGeneration(host.manager, 'items', 1, 200, host.publisher);
 * ```
 */
export async function startWriterHost(
  natsUrl: string,
  options: { prefix: string; nodeId: string },
): Promise<WriterHost> {
  const dir = await tempDir(options.prefix);
  let manager: CacheManager | undefined;
  try {
    manager = await openCacheManager(dir.path, { gcGraceMs: 3_600_000 });
    const publisher = await createNatsBackplane({
      nats: natsUrl,
      clusterName: 'sluice',
      nodeId: options.nodeId,
    });
    const opened = manager;
    return {
      dir,
      manager: opened,
      publisher,
      async [Symbol.asyncDispose]() {
        await publisher.close();
        await opened.close();
        await dir.remove();
      },
    };
  } catch (err) {
    await manager?.close();
    await dir.remove();
    throw err;
  }
}
