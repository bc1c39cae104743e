import type { Logger, OwnerAnswer, TerminateAnswer, WhoRunsOptions } from '@sluice/core';
import { LocalBackplane } from './shared/local-backplane.js';
import { localOwner, localTerminate } from './shared/local-first.js';
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
export class SingleNodeBackplane extends LocalBackplane {
  constructor(options: SingleNodeBackplaneOptions = {}) {
    super(options.nodeId ?? 'local', options.logger);
  }

  async whoRuns(transferId: string, options: WhoRunsOptions): Promise<OwnerAnswer> {
    const id = checkTransferId(transferId);
    checkTimeout(options.timeoutMs);
    if (this.closed) return { status: 'unknown', reason: 'backplane closed' };
    // One process is the whole cluster: what it does not run, nobody runs.
    return localOwner(this.local, id) ?? { status: 'nobody' };
  }

  async terminate(transferId: string, options: WhoRunsOptions): Promise<TerminateAnswer> {
    const id = checkTransferId(transferId);
    checkTimeout(options.timeoutMs);
    if (this.closed) return { status: 'unknown', reason: 'backplane closed' };
    return (await localTerminate(this.local, id)) ?? { status: 'not-running' };
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
