import type { TransferRecord } from '@sluice/core';

/** The owner of a transfer as clients see it. */
export interface OwnerView {
  nodeId: string;
  address: string | null;
}

/** A transfer record as the control API returns it (JSON-ready: dates as ISO strings, no checkpoint). */
export interface TransferView {
  id: string;
  mode: string;
  state: TransferRecord['state'];
  owner: OwnerView | null;
  epoch: number;
  attempts: number;
  leaseExpiresAt: string | null;
  error: TransferRecord['error'];
  result: TransferRecord['result'];
  createdAt: string;
  updatedAt: string;
  request: TransferRecord['request'];
}

/** Renders a record for the API. */
export function transferView(record: TransferRecord): TransferView {
  return {
    id: record.id,
    mode: record.request.mode,
    state: record.state,
    owner: record.ownerNodeId === null ? null : { nodeId: record.ownerNodeId, address: record.ownerAddress },
    epoch: record.epoch,
    attempts: record.attempts,
    leaseExpiresAt: record.leaseExpiresAt ? record.leaseExpiresAt.toISOString() : null,
    error: record.error,
    result: record.result,
    createdAt: record.createdAt.toISOString(),
    updatedAt: record.updatedAt.toISOString(),
    request: record.request,
  };
}
