import type { NodeInfo, TransferRecord, TransferRequest } from '@sluice/core';
import type { NodeRow, TransferRow } from './schema.js';

function parseJson<T>(text: string | null): T | null {
  return text === null ? null : (JSON.parse(text) as T);
}

/** Converts a stored row into the domain record. */
export function rowToRecord(row: TransferRow): TransferRecord {
  return {
    id: row.id,
    requestHash: row.request_hash,
    request: JSON.parse(row.request) as TransferRequest,
    state: row.state,
    ownerNodeId: row.owner_node_id,
    ownerAddress: row.owner_address,
    ownerInstance: row.owner_instance,
    epoch: Number(row.epoch),
    leaseExpiresAt: row.lease_expires_at === null ? null : new Date(Number(row.lease_expires_at)),
    attempts: Number(row.attempts),
    retries: Number(row.retries),
    finishingEpoch: row.finishing_epoch === null ? null : Number(row.finishing_epoch),
    error: parseJson(row.error),
    result: parseJson(row.result),
    checkpoint: parseJson(row.checkpoint),
    createdAt: new Date(Number(row.created_at)),
    updatedAt: new Date(Number(row.updated_at)),
  };
}

/** `storeNowMs`: the store's clock when the row was read (`silentMs` is measured against it). */
export function rowToNode(row: NodeRow, storeNowMs: number): NodeInfo {
  return {
    nodeId: row.node_id,
    address: row.address,
    instanceId: row.instance_id,
    startedAt: new Date(Number(row.started_at)),
    lastSeenAt: new Date(Number(row.last_seen_at)),
    silentMs: Math.max(0, storeNowMs - Number(row.last_seen_at)),
  };
}
