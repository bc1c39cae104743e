import type { PipelineProgress, TransferRecord, TransferView } from '@sluice/core';

export type { TransferView };

/** The owner of a transfer as clients see it. */
export type OwnerView = NonNullable<TransferView['owner']>;

/**
 * Renders a record for the API. `local` is this node's progress of the transfer when it runs it here: shown only
 * while the record is `IN_PROGRESS` (a finished record has its `result`).
 *
 * @example
 * ```ts
 * reply.send(transferView(record, runs.get(record.id)?.progress));
 * ```
 */
export function transferView(record: TransferRecord, local?: PipelineProgress | null): TransferView {
  return {
    id: record.id,
    mode: record.request.mode,
    state: record.state,
    owner: record.ownerNodeId === null ? null : { nodeId: record.ownerNodeId, address: record.ownerAddress },
    epoch: record.epoch,
    attempts: record.attempts,
    retries: record.retries,
    leaseExpiresAt: record.leaseExpiresAt ? record.leaseExpiresAt.toISOString() : null,
    error: record.error,
    result: record.result,
    progress:
      local && record.state === 'IN_PROGRESS'
        ? {
            phase: local.phase,
            recordsRead: local.recordsRead,
            recordsWritten: local.recordsWritten,
            rate: local.rate,
            ...(local.replication ? { replication: local.replication } : {}),
          }
        : null,
    createdAt: record.createdAt.toISOString(),
    updatedAt: record.updatedAt.toISOString(),
    request: record.request,
  };
}
