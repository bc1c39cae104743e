import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { createNatsBackplane } from '@sluice/backplane';
import { openCacheManager, readDataDirHost } from '@sluice/cache';
import {
  backplaneKind,
  type CacheCatalog,
  type Logger,
  queryLimitsOf,
  type SluiceConfig,
} from '@sluice/core';
import { createLogger, DataDirAccess, listenError, prepareDataDir, ShutdownDrain } from '@sluice/http';
import type { Logger as PinoLogger } from 'pino';
import { type ApiApp, buildApp } from './app.js';
import { InFlight } from './in-flight.js';
import { type ApiMetrics, createMetrics } from './metrics.js';
import { type AliasEventSource, EndpointRegistry } from './registry.js';

/** Longest a shutdown waits for requests the fast routes took (a query's body still arriving). */
const FAST_ROUTES_GRACE_MS = 10_000;

export interface StartApiServerOptions {
  config: SluiceConfig;
  /** Absolute LMDB root of this host (default: `config.dataDir` resolved against the working directory). */
  dataDir?: string;
  logger?: PinoLogger;
  /** Overrides `api.host` / `api.port` (port 0 = any free port). */
  host?: string;
  port?: number;
  /** How often the alias table version is polled while no backplane is connected (ms, default 200). */
  watchMs?: number;
}

/** A running api-server. */
export interface ApiServer extends AsyncDisposable {
  /** `http://host:port`. */
  readonly url: string;
  readonly port: number;
  readonly app: ApiApp;
  readonly registry: EndpointRegistry;
  readonly metrics: ApiMetrics;
  /**
   * Begins the drain before a close (SIGTERM, `http.drainDelayMs`): `/readyz` answers 503 `stopping` while every
   * request is still served, each answer with `Connection: close` (`ShutdownDrain`).
   */
  drain(): void;
  /** Graceful: stops accepting, finishes requests in flight, closes every cache and the backplane. */
  close(): Promise<void>;
}

/**
 * Starts an api-server: opens the host's caches read-only, subscribes to alias events (NATS, when configured)
 * before opening any endpoint, and serves the query API.
 *
 * @example
 * ```ts
 * const { config, dataDir } = loadConfig({ configPath: 'sluice.yaml', env: process.env });
 * await using server = await startApiServer({ config, dataDir });
 * console.log(server.url);
 * ```
 */
export async function startApiServer(options: StartApiServerOptions): Promise<ApiServer> {
  const { config } = options;
  const logger = options.logger ?? createLogger({ service: 'sluice-api-server', level: config.logLevel });
  const coreLogger: Logger = logger;
  const dataDir = options.dataDir ?? resolve(config.dataDir);
  const limits = queryLimitsOf(config);
  const metrics = createMetrics();
  const disposers: Array<() => Promise<void>> = [];
  let stopping = false;
  let registryRef: EndpointRegistry | null = null;
  try {
    // It only reads the caches: a directory it may read but not write serves; one it may not read, or a file in
    // its place, is CONFIG_INVALID naming dataDir rather than an fs stack from the cache's first mkdir.
    prepareDataDir(dataDir, DataDirAccess.READ);
    const caches = (await openCacheManager(dataDir, {
      readOnly: true,
      logger: coreLogger,
      scanCap: config.cache.scanCap,
      defaultLimit: limits.defaultLimit,
      maxLimit: limits.maxLimit,
      // The configured filter limits: the cache checks every query again, and must not refuse one the api-server's
      // parser accepted under `query.maxIn` / `query.maxDepth`.
      maxIn: limits.maxIn,
      maxDepth: limits.maxDepth,
    })) satisfies CacheCatalog;
    disposers.unshift(() => caches.close());
    // Whose alias events move these caches: the host recorded in dataDir by the app-server writing it. A node id of
    // its own that differs (the shared sluice.yaml of a cluster often gives api-servers none) would subscribe to
    // another host's events and leave every switch to the table watch.
    const aliasHost = readDataDirHost(dataDir) ?? config.node.id;
    if (aliasHost !== config.node.id)
      logger.warn(
        { nodeId: config.node.id, host: aliasHost, dataDir },
        "node.id differs from the host whose app-server writes dataDir; following that host's alias events",
      );

    // The backplane is optional for correctness (the alias table is the truth): when NATS cannot be reached at
    // start, serve from the table, watch its version, and keep trying to connect in the background.
    let events: AliasEventSource | undefined;
    let connectLater: (() => void) | null = null;
    // The host's backplane, as its app-server chose it: with another strategy no alias event is published on
    // NATS (even when `nats` is set for JetStream sources), so the alias table is watched instead.
    if (config.nats !== undefined && backplaneKind(config) === 'nats') {
      const nats = config.nats;
      const connectBackplane = async () => {
        const backplane = await createNatsBackplane({
          nats,
          clusterName: config.cluster.name,
          nodeId: `${config.node.id}-api-${process.pid}-${randomBytes(3).toString('hex')}`,
          // This host's caches are the app-server's of the same sluice.yaml: only its alias events matter here.
          aliasHost,
          logger: coreLogger,
        });
        metrics.backplaneConnected.set(backplane.status() === 'connected' ? 1 : 0);
        backplane.onStatus((status: string) =>
          metrics.backplaneConnected.set(status === 'connected' ? 1 : 0),
        );
        return backplane;
      };
      try {
        const backplane = await connectBackplane();
        disposers.unshift(() => backplane.close());
        events = backplane;
      } catch (err) {
        logger.warn(
          { err },
          'NATS is unreachable; serving from the alias table and retrying in the background',
        );
        connectLater = () => {
          let delay = 500;
          let timer: NodeJS.Timeout | null = null;
          let cancelled = false;
          const attempt = async () => {
            timer = null;
            try {
              const backplane = await connectBackplane();
              if (cancelled) {
                await backplane.close();
                return;
              }
              disposers.splice(disposers.length - 1, 0, () => backplane.close());
              await registryRef?.attachEvents(backplane);
              logger.info('connected to NATS; following alias events');
            } catch (retryErr) {
              if (cancelled) return;
              logger.debug({ err: retryErr }, 'NATS still unreachable');
              delay = Math.min(delay * 2, 10_000);
              timer = setTimeout(() => void attempt(), delay);
              timer.unref();
            }
          };
          timer = setTimeout(() => void attempt(), delay);
          timer.unref();
          disposers.unshift(async () => {
            cancelled = true;
            if (timer) clearTimeout(timer);
          });
        };
      }
    }

    const registry = await EndpointRegistry.start({
      caches,
      host: aliasHost,
      events,
      configured: config.endpoints.map((endpoint) => endpoint.name),
      logger: coreLogger,
      reconcileMs: config.api.reconcileMs,
      watchMs: options.watchMs,
      onSwitch: ({ alias, from, reason }) => {
        if (from !== null) metrics.switches.inc({ endpoint: alias, reason });
      },
      onSwitchFailure: ({ alias }) => metrics.switchFailures.inc({ endpoint: alias }),
    });
    disposers.unshift(() => registry.close());
    registryRef = registry;
    connectLater?.();
    metrics.observe({
      endpoints: () => registry.names().length,
      generationsOpen: () => registry.openGenerations(),
    });

    const inFlight = new InFlight();
    const app = await buildApp({
      config,
      registry,
      metrics,
      limits,
      logger,
      isStopping: () => stopping,
      isDraining: () => drain.draining,
      inFlight,
    });
    const drain = new ShutdownDrain(app.server);
    disposers.unshift(() => app.close());
    const host = options.host ?? config.api.host;
    await app.listen({ host, port: options.port ?? config.api.port }).catch((err: unknown) => {
      throw listenError(err, { key: options.host === undefined ? 'api.host' : '--host', host });
    });
    const address = app.server.address();
    const port = typeof address === 'object' && address ? address.port : (options.port ?? config.api.port);
    const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
    logger.info(
      { url, dataDir, backplane: backplaneKind(config), endpoints: registry.names() },
      'api-server listening',
    );

    let closing: Promise<void> | null = null;
    const close = () => {
      closing ??= (async () => {
        stopping = true;
        // The fast routes take nothing new now; those they took finish before fastify closes (in-flight.ts).
        await inFlight.drained(FAST_ROUTES_GRACE_MS);
        if (inFlight.count > 0)
          logger.warn(
            { requests: inFlight.count },
            'requests still in flight after the grace period; closing',
          );
        for (const dispose of disposers) {
          try {
            await dispose();
          } catch (err) {
            logger.warn({ err }, 'error during shutdown');
          }
        }
        logger.info('api-server stopped');
        logger.flush?.();
      })();
      return closing;
    };
    return {
      url,
      port,
      app,
      registry,
      metrics,
      drain: () => drain.begin(),
      close,
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    for (const dispose of disposers) await dispose().catch(() => undefined);
    throw err;
  }
}
