import type { OwnerReport } from '@sluice/core';

/**
 * What the direct strategy's internal routes call: a {@link DirectBackplane} (or anything answering for the transfers
 * it runs). Its own module, free of fastify, so the package's main entry can name it without fastify's types
 * (the plugin itself is `@sluice/backplane/fastify`).
 */
export interface DirectRoutesTarget {
  readonly nodeId: string;
  /** This node's report for the transfer, or null when it does not run it (→ 404). Throws on a bad id. */
  handleOwnerQuery(transferId: string): OwnerReport | null;
  /** Stops the transfer here: true once stopped (→ 200), false when not running here (→ 404). */
  handleTerminate(transferId: string): Promise<boolean>;
}
