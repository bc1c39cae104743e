import { createHmac, randomUUID } from 'node:crypto';
import { join, resolve } from 'node:path';
import {
  createDirectBackplane,
  createNatsBackplane,
  createSingleNodeBackplane,
  type DirectRoutesTarget,
} from '@sluice/backplane';
import { writeDataDirHost } from '@sluice/cache';
import {
  type Backplane,
  type Clock,
  type ConfigWarning,
  type Logger,
  redactUrl,
  type SluiceConfig,
  SluiceError,
  systemClock,
  transferRetentionMs,
} from '@sluice/core';
import { createLogger, listenError, ShutdownDrain } from '@sluice/http';
import { discardTransferLeftovers, holdTransferFence, runTransfer } from '@sluice/pipeline';
import { openStore } from '@sluice/store';
import type { FastifyInstance } from 'fastify';
import type pino from 'pino';
import { AliasAnnouncer } from './alias-announcer.js';
import { backplaneKind } from './config.js';
import { lockDataDir } from './data-dir-lock.js';
import { buildServer } from './http/server.js';
import { createMetrics } from './metrics.js';
import { openServingPlane } from './serving.js';
import { accessFailure } from './transfers/access.js';
import { RequestPolicy } from './transfers/confinement.js';
import { TransferCoordinator } from './transfers/coordinator.js';
import { FIRE_AND_FORGET_JOURNAL_DIR } from './transfers/fire-and-forget-journal.js';

/** A running app-server node. */
export interface SluiceNode extends AsyncDisposable {
  readonly nodeId: string;
  readonly instanceId: string;
  /** The URL the node listens on (its advertised URL unless configured otherwise). */
  readonly url: string;
  readonly server: FastifyInstance;
  readonly coordinator: TransferCoordinator;
  /**
   * Begins the drain before a close (SIGTERM, `http.drainDelayMs`): `/readyz` answers 503 (`node: "stopping"`) while
   * every request is still served, each answer with `Connection: close` (`ShutdownDrain`); transfers run on.
   */
  drain(): void;
  /** Graceful stop: stop accepting, hand transfers back, stop pipelines, close everything. */
  close(): Promise<void>;
}

export interface StartNodeOptions {
  logger?: pino.Logger;
  clock?: Clock;
  /** Working directory that relative paths (store, dataDir, file roots, endpoint sources) resolve against. */
  cwd?: string;
  /** What the configuration's parse warned about (keys that moved): logged once at start. */
  configWarnings?: ReadonlyArray<ConfigWarning>;
  /** Aborted to give up a start that waits (for NATS, `backplane.connectWaitMs`): a signal arrived meanwhile. */
  stopping?: AbortSignal;
}

/** An HS256 JWT this node presents to its peers' internal routes when auth is JWT-only. */
function peerJwt(secret: string, nodeId: string): string {
  const encode = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const body = `${encode({ alg: 'HS256', typ: 'JWT' })}.${encode({ sub: `node:${nodeId}`, iat: Math.floor(Date.now() / 1000) })}`;
  return `${body}.${createHmac('sha256', secret).update(body).digest('base64url')}`;
}

/**
 * Starts an app-server node from a resolved configuration: store, backplane (NATS when configured, else
 * single-node on SQLite, else direct-address), LMDB caches, endpoint pipelines, the transfer coordinator
 * (heartbeats, sweeper) and the HTTP control API.
 *
 * @example
 * ```ts
 * const node = await startNode(loadConfig({ configPath: 'sluice.yaml', env: process.env }).config);
 * process.once('SIGTERM', () => void node.close());
 * ```
 */
export async function startNode(config: SluiceConfig, options: StartNodeOptions = {}): Promise<SluiceNode> {
  const logger =
    options.logger ??
    createLogger({
      service: 'sluice-app-server',
      level: config.logLevel,
      bindings: { node: config.node.id },
    });
  const log: Logger = logger;
  for (const warning of options.configWarnings ?? [])
    logger.warn({ key: warning.path, movedTo: warning.movedTo }, warning.message);
  const clock = options.clock ?? systemClock;
  const cwd = options.cwd ?? process.cwd();
  const instanceId = randomUUID();
  const nodeId = config.node.id;
  const identity = { nodeId, address: config.node.advertisedUrl ?? '', instanceId };
  const cleanups: Array<() => Promise<unknown>> = [];
  // Each step of a shutdown is bounded, and all of them together end before runCli's forced exit (@sluice/http:
  // grace + 10 s): a peer that is down (NATS between reconnects, a hung connection) must not turn a graceful stop
  // into exit 1. What such a step would have flushed is fenced or re-sent by the next owner.
  let shutdownDeadline = Number.POSITIVE_INFINITY;
  const within = async (what: string, step: Promise<unknown>, ms = 2_000) => {
    const wait = Math.max(0, Math.min(ms, shutdownDeadline - Date.now()));
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), wait);
      timer.unref();
    });
    const outcome = await Promise.race([
      step.then(
        () => 'done' as const,
        () => 'done' as const,
      ),
      gaveUp,
    ]);
    clearTimeout(timer);
    if (outcome === 'timeout')
      log.warn({ step: what, waitedMs: wait }, 'shutdown step did not finish; going on');
  };
  const unwind = async () => {
    for (const cleanup of cleanups.reverse()) await within('cleanup', cleanup());
  };

  try {
    // First of all: one app-server per data directory (before anything is opened or written there).
    const dataDir = resolve(cwd, config.dataDir);
    const dataDirLock = lockDataDir(dataDir);
    cleanups.push(async () => dataDirLock.release());
    // The host its alias events name: the api-servers reading this directory follow these events, whatever node id
    // their own configuration resolves to (a cluster's shared sluice.yaml often gives them none).
    writeDataDirHost(dataDir, nodeId);

    // The embedded store is single-node: a second app-server on the same SQLite file is refused here.
    const store = await openStore(config.store, { clock, logger: log, exclusive: true });
    cleanups.push(() => store[Symbol.asyncDispose]());

    const kind = backplaneKind(config);
    const auth = config.control.auth;
    const peerToken = auth?.tokens?.[0] ?? (auth?.jwtSecret ? peerJwt(auth.jwtSecret, nodeId) : undefined);
    let direct: DirectRoutesTarget | null = null;
    let backplane: Backplane;
    if (kind === 'nats') {
      backplane = await createNatsBackplane({
        nats: config.nats!,
        clusterName: config.cluster.name,
        nodeId,
        // One subscription answers for every transfer this process claims: a claim costs no NATS round trip.
        instanceId,
        logger: log,
        // Started together with NATS (a compose file, a rebooted host): wait for it rather than exit.
        connectWaitMs: config.backplane.connectWaitMs,
        ...(options.stopping ? { signal: options.stopping } : {}),
      });
    } else if (kind === 'single') {
      backplane = createSingleNodeBackplane({ nodeId, logger: log });
    } else {
      const directBackplane = createDirectBackplane({
        nodeId,
        logger: log,
        fetchTimeoutMs: Math.max(config.transfers.ownerWaitMs, 30_000),
        ...(peerToken ? { headers: { authorization: `Bearer ${peerToken}` } } : {}),
      });
      direct = directBackplane;
      backplane = directBackplane;
    }
    cleanups.push(() => backplane.close());

    const serving = await openServingPlane(config, { events: backplane, logger: log, cwd });
    cleanups.push(() => serving.close());
    const { caches, endpoints } = serving;
    if (kind === 'nats') {
      // NATS keeps the latest redirect per alias for readers that stay connected or connect late; a redirect it
      // never got (a switch while it was out of reach, this process stopped before it came back) is announced from
      // the alias table on start and on every reconnect (alias-announcer.ts).
      const announcer = AliasAnnouncer.start({
        backplane,
        aliases: () => caches.listAliases(),
        host: config.node.id,
        logger: log,
      });
      cleanups.push(() => announcer[Symbol.asyncDispose]());
    }

    const policy = new RequestPolicy({
      roots: config.files.roots,
      connections: config.connections,
      endpoints: endpoints.names(),
      cwd,
    });
    let coordinator: TransferCoordinator | null = null;
    const metrics = createMetrics({
      transfers: () => coordinator?.stats() ?? { running: 0, queued: 0, fireAndForget: 0 },
      pipelines: () => endpoints.samples(),
    });
    coordinator = new TransferCoordinator({
      store,
      backplane,
      identity,
      limits: config.transfers,
      policy,
      metrics,
      logger: log,
      clock,
      discard: (request, writer) =>
        discardTransferLeftovers(request, {
          connections: config.connections,
          ...(config.nats !== undefined ? { nats: config.nats } : {}),
          ...(writer !== undefined ? { writer } : {}),
        }),
      // In the data directory: the lock above makes every entry there this process's or a dead one's.
      fireAndForgetJournal: join(dataDir, FIRE_AND_FORGET_JOURNAL_DIR),
      fenceDestination: (request, epoch) =>
        holdTransferFence(request, { connections: config.connections }, epoch),
      execute: async (request, context) => {
        const outcome = await runTransfer(request, {
          checkpoint: context.checkpoint,
          connections: config.connections,
          ...(caches ? { caches } : {}),
          ...(config.nats !== undefined ? { nats: config.nats } : {}),
          events: backplane,
          signal: context.signal,
          onProgress: context.onProgress,
          logger: log,
          commitEveryRecords: config.pipeline.commitEveryRecords,
          commitEveryMs: config.pipeline.commitEveryMs,
          ...(context.writer !== undefined ? { writer: context.writer } : {}),
        }).catch((err: unknown) => {
          // A permission refusal on the request's files is the operator's to fix: said as such, not as a
          // generic source or sink failure.
          throw accessFailure(err, request) ?? err;
        });
        return {
          recordsRead: outcome.recordsRead,
          recordsWritten: outcome.recordsWritten,
          badRecords: outcome.badRecords,
          ...(outcome.durationMs !== undefined ? { durationMs: outcome.durationMs } : {}),
        };
      },
    });
    const activeCoordinator = coordinator;

    const server = await buildServer({
      logger,
      bodyLimit: config.http.bodyBytes,
      pageSizeMax: config.http.pageSizeMax,
      auth,
      streams: {
        maxStreams: config.control.maxStreams,
        maxStreamsPerClient: config.control.maxStreamsPerClient,
      },
      coordinator: activeCoordinator,
      endpoints,
      switches: serving.onSwitch,
      metrics,
      nodeId,
      direct,
      nodes: async () =>
        (await store.listNodes()).map((node) => ({
          nodeId: node.nodeId,
          address: node.address,
          instanceId: node.instanceId,
          startedAt: node.startedAt.toISOString(),
          lastSeenAt: node.lastSeenAt.toISOString(),
          // Judged on the store's clock: a node whose wall clock is off sees the same answer as every other.
          alive: node.silentMs <= config.transfers.leaseMs,
        })),
      readiness: async () => {
        // Draining before the close: not ready whatever the store and backplane say, so a balancer takes it out.
        if (drain.draining) return { ready: false, checks: { node: 'stopping' } };
        const checks: Record<string, string> = {};
        let ready = true;
        try {
          await store.ping();
          checks.store = 'up';
        } catch (err) {
          // The database answers but the store's tables are gone: not ready either, and said apart from "down".
          checks.store =
            SluiceError.isInstance(err) && err.details?.reason === 'schema-missing'
              ? 'schema-missing'
              : 'down';
          ready = false;
        }
        const status = backplane.status();
        checks.backplane = status === 'connected' ? 'up' : status;
        checks.backplaneKind = kind;
        if (status !== 'connected') ready = false;
        return { ready, checks };
      },
    });
    const drain = new ShutdownDrain(server.server);
    const closeServer = () => server.close();
    cleanups.push(closeServer);

    const address = await server
      .listen({ host: config.node.host, port: config.node.port })
      .catch((err: unknown) => {
        throw listenError(err, { key: 'node.host', host: config.node.host });
      });
    const listening = new URL(address);
    if (config.node.port === 0 || identity.address === '') {
      identity.address = `http://${config.node.host === '0.0.0.0' ? '127.0.0.1' : config.node.host}:${listening.port}`;
    }
    await store.registerNode({ nodeId, address: identity.address, instanceId });
    activeCoordinator.start();
    // Finished records are kept `retention.transferDays` (0 = forever), then purged by whichever node gets there.
    const retentionMs = transferRetentionMs(config.retention);
    const purge = () => {
      if (retentionMs <= 0) return;
      store.purge(retentionMs).then(
        (purged) => {
          if (purged > 0) logger.info({ purged }, 'purged finished transfers past their retention');
        },
        (err) => logger.warn({ err }, 'purging finished transfers failed'),
      );
    };
    purge();
    const purgeTimer = setInterval(purge, 3_600_000);
    purgeTimer.unref();
    cleanups.push(async () => clearInterval(purgeTimer));
    logger.info(
      { url: identity.address, store: redactUrl(config.store), backplane: kind, instanceId },
      'app-server ready',
    );

    let closing: Promise<void> | null = null;
    const close = () => {
      closing ??= (async () => {
        logger.info('shutting down: handing transfers back');
        shutdownDeadline = Date.now() + config.transfers.shutdownGraceMs + 8_000;
        // Stop accepting first (in-flight requests finish), then hand work back, then close the rest. The listener's
        // close and the coordinator's shutdown start in this one synchronous step: no run sees the listener gone (a
        // peer of the direct backplane then hears "nobody") before the coordinator counts as closing (no finishing
        // shortcut from then on, execution.ts).
        cleanups.splice(cleanups.indexOf(closeServer), 1);
        const serverClosed = server.close();
        await within('transfers', activeCoordinator.shutdown(), config.transfers.shutdownGraceMs + 1_000);
        await within('http server', serverClosed);
        await unwind();
        logger.info('app-server stopped');
      })();
      return closing;
    };
    return {
      nodeId,
      instanceId,
      get url() {
        return identity.address;
      },
      server,
      coordinator: activeCoordinator,
      drain: () => {
        logger.info(
          { drainDelayMs: config.http.drainDelayMs },
          'draining: readiness 503, still serving, then shutting down',
        );
        drain.begin();
      },
      close,
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    await unwind();
    throw err;
  }
}
