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
import { LocalEventBus } from './local-events.js';
import type { LocalSide } from './local-first.js';
import { LocalRegistry } from './local-registry.js';
import { StatusTracker } from './status.js';
import { checkTransferId } from './wire.js';

/**
 * What the backplanes without a broker share: responders kept in this process, events fanned out in this
 * process, a status that is `connected` until `close()`. Subclasses decide how "who runs X?" is answered.
 */
export abstract class LocalBackplane implements Backplane {
  readonly nodeId: string;
  protected readonly registry = new LocalRegistry();
  protected readonly logger: Logger;
  /** This process's side of "who runs X?", asked first (`localOwner`, `localTerminate`). */
  protected readonly local: LocalSide;
  readonly #events: LocalEventBus;
  readonly #status: StatusTracker;

  constructor(nodeId: string, logger: Logger | undefined) {
    this.nodeId = nodeId;
    this.logger = logger ?? silentLogger;
    this.local = { registry: this.registry, nodeId, logger: this.logger };
    this.#events = new LocalEventBus(this.logger);
    this.#status = new StatusTracker('connected', this.logger);
  }

  abstract whoRuns(transferId: string, options: WhoRunsOptions): Promise<OwnerAnswer>;
  abstract terminate(transferId: string, options: WhoRunsOptions): Promise<TerminateAnswer>;

  async serve(transferId: string, responder: TransferResponder): Promise<Registration> {
    this.assertOpen();
    const id = checkTransferId(transferId);
    const remove = this.registry.add(id, responder);
    const close = async () => remove();
    return { close, [Symbol.asyncDispose]: close };
  }

  async publish(event: SluiceEvent): Promise<void> {
    this.assertOpen();
    this.#events.publish(event);
  }

  async subscribe(
    handler: (event: SluiceEvent) => void | Promise<void>,
    options?: SubscribeOptions,
  ): Promise<Registration> {
    this.assertOpen();
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

  /**
   * Until `close()`, whatever `since`: there is no connection to lose. The direct strategy's peers hear "nobody"
   * only from a refused connection (nothing listens at this node's address: its process is gone) or from a 404 of
   * its routes (the registry has no such transfer, which `close()` empties); the single-node strategy is asked by
   * this process only.
   */
  reachableSince(_since: number): boolean {
    return !this.closed;
  }

  async close(): Promise<void> {
    if (this.#status.get() === 'closed') return;
    this.#status.set('closed');
    this.registry.clear();
    this.#events.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  protected get closed(): boolean {
    return this.#status.get() === 'closed';
  }

  protected assertOpen(): void {
    if (this.closed) throw new BackplaneUnavailableError('The backplane is closed');
  }
}
