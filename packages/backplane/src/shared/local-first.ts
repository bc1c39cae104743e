// Every strategy answers for the transfers this process runs before it asks anyone else: the owner may be this
// node, and then the answer is certain and immediate. These are that first step, once for all strategies.
import type { Logger, OwnerAnswer, TerminateAnswer } from '@sluice/core';
import type { LocalRegistry } from './local-registry.js';

/** What the local step needs: this process's registry, its node id (`by` of a terminate) and its logger. */
export interface LocalSide {
  readonly registry: LocalRegistry;
  readonly nodeId: string;
  readonly logger: Logger;
}

/**
 * "Who runs X?" answered by this process: `owner` when it runs X, `unknown` when its responder's report is
 * invalid (a bug here, not an absent owner), or null when it does not run X (the caller asks the others).
 */
export function localOwner(local: LocalSide, transferId: string): OwnerAnswer | null {
  try {
    const owner = local.registry.report(transferId);
    return owner ? { status: 'owner', owner } : null;
  } catch (err) {
    local.logger.error({ err, transferId }, 'local responder produced an invalid report');
    return { status: 'unknown', reason: 'the owner produced an invalid report' };
  }
}

/**
 * "Stop X" done by this process: `terminated` once its responder stopped, `unknown` when stopping failed, or null
 * when it does not run X (the caller asks the others).
 */
export async function localTerminate(local: LocalSide, transferId: string): Promise<TerminateAnswer | null> {
  if (!local.registry.has(transferId)) return null;
  try {
    return (await local.registry.terminate(transferId)) ? { status: 'terminated', by: local.nodeId } : null;
  } catch (err) {
    local.logger.error({ err, transferId }, 'terminating a local transfer failed');
    return { status: 'unknown', reason: `the owner failed to stop: ${(err as Error).message}` };
  }
}
