import type {
  Backplane,
  BackplaneStatus,
  Logger,
  OwnerAnswer,
  Registration,
  SluiceEvent,
  SubscribeOptions,
  TerminateAnswer,
  TransferResponder,
  WhoRunsOptions,
} from '@sluice/core';
import { BackplaneUnavailableError, silentLogger } from '@sluice/core';
import { LocalEventBus } from './shared/local-events.js';
import { LocalRegistry } from './shared/local-registry.js';
import { StatusTracker } from './shared/status.js';
import { checkTimeout, checkTransferId } from './shared/wire.js';

export interface SingleNodeBackplaneOptions {
  /** Reported as the owner's node id (default `local`). */
  nodeId?: string;
  logger?: Logger;
}

/**
 * The embedded default: one process is the whole cluster, so "who runs X?" is a map lookup and events fan out
 * in-process. `nobody` is always a certain answer here; `unknown` only comes after `close()`.
 */
export class SingleNodeBackplane implements Backplane {
  readonly nodeId: string;
  readonly #registry = new LocalRegistry();
  readonly #events: LocalEventBus;
  readonly #status: StatusTracker;
  readonly #logger: Logger;

  constructor(options: SingleNodeBackplaneOptions = {}) {
    this.nodeId = options.nodeId ?? 'local';
    this.#logger = options.logger ?? silentLogger;
    this.#events = new LocalEventBus(this.#logger);
    this.#status = new StatusTracker('connected', this.#logger);
  }

  async serve(transferId: string, responder: TransferResponder): Promise<Registration> {
    this.#assertOpen();
    const id = checkTransferId(transferId);
    const remove = this.#registry.add(id, responder);
    const close = async () => remove();
    return { close, [Symbol.asyncDispose]: close };
  }

  async whoRuns(transferId: string, options: WhoRunsOptions): Promise<OwnerAnswer> {
    const id = checkTransferId(transferId);
    checkTimeout(options.timeoutMs);
    if (this.#status.get() === 'closed') return { status: 'unknown', reason: 'backplane closed' };
    try {
      const owner = this.#registry.report(id);
      return owner ? { status: 'owner', owner } : { status: 'nobody' };
    } catch (err) {
      this.#logger.error({ err, transferId: id }, 'local responder produced an invalid report');
      return { status: 'unknown', reason: 'the owner produced an invalid report' };
    }
  }

  async terminate(transferId: string, options: WhoRunsOptions): Promise<TerminateAnswer> {
    const id = checkTransferId(transferId);
    checkTimeout(options.timeoutMs);
    if (this.#status.get() === 'closed') return { status: 'unknown', reason: 'backplane closed' };
    try {
      return (await this.#registry.terminate(id))
        ? { status: 'terminated', by: this.nodeId }
        : { status: 'not-running' };
    } catch (err) {
      this.#logger.error({ err, transferId: id }, 'terminating a local transfer failed');
      return { status: 'unknown', reason: `the owner failed to stop: ${(err as Error).message}` };
    }
  }

  async publish(event: SluiceEvent): Promise<void> {
    this.#assertOpen();
    this.#events.publish(event);
  }

  async subscribe(
    handler: (event: SluiceEvent) => void | Promise<void>,
    options?: SubscribeOptions,
  ): Promise<Registration> {
    this.#assertOpen();
    return this.#events.subscribe(handler, options);
  }

  async latestAliasEvents(): Promise<SluiceEvent[]> {
    return this.#events.latest();
  }

  status(): BackplaneStatus {
    return this.#status.get();
  }

  onStatus(listener: (status: BackplaneStatus) => void): () => void {
    return this.#status.on(listener);
  }

  async close(): Promise<void> {
    if (this.#status.get() === 'closed') return;
    this.#status.set('closed');
    this.#registry.clear();
    this.#events.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #assertOpen(): void {
    if (this.#status.get() === 'closed') throw new BackplaneUnavailableError('The backplane is closed');
  }
}

/**
 * Creates the in-process backplane used by a single embedded node.
 *
 * @example
 * ```ts
 * await using backplane = createSingleNodeBackplane({ nodeId: 'n1' });
 * await using _ = await backplane.serve('t-1', { report: () => ({ nodeId: 'n1', address: '', epoch: 1 }), terminate: stop });
 * await backplane.whoRuns('t-1', { timeoutMs: 100 }); // { status: 'owner', owner: { nodeId: 'n1', … } }
 * ```
 */
export function createSingleNodeBackplane(options: SingleNodeBackplaneOptions = {}): SingleNodeBackplane {
  return new SingleNodeBackplane(options);
}
