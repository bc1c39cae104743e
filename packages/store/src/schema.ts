import type { TransferState } from '@sluice/core';

/**
 * Row shapes of the store's tables. Timestamps are milliseconds since the Unix epoch (UTC) in integer
 * columns on both dialects, so leases compare the same way everywhere; JSON columns hold text.
 */
export interface TransfersTable {
  id: string;
  request_hash: string;
  /** The request as JSON text. */
  request: string;
  state: TransferState;
  owner_node_id: string | null;
  owner_address: string | null;
  owner_instance: string | null;
  epoch: number;
  lease_expires_at: number | null;
  attempts: number;
  /** Retryable failures since the last checkpoint that moved (migration 0002). */
  retries: number;
  /** `TransferFailure` as JSON text. */
  error: string | null;
  /** `TransferResult` as JSON text. */
  result: string | null;
  /** The pipeline checkpoint as JSON text. */
  checkpoint: string | null;
  /**
   * The epoch whose owner confirmed its fenced finishing step (migration 0003): while it is the record's epoch and
   * the lease is fresh, no owner change on a "nobody" lands (queries.ts `ownerChange`). Null until then.
   */
  finishing_epoch: number | null;
  created_at: number;
  updated_at: number;
}

export interface NodesTable {
  node_id: string;
  address: string;
  instance_id: string;
  started_at: number;
  last_seen_at: number;
}

export interface StoreDatabase {
  transfers: TransfersTable;
  nodes: NodesTable;
}

export type TransferRow = TransfersTable;
export type NodeRow = NodesTable;

/** Table and column names, shared by queries and migrations. */
export const TRANSFERS = 'transfers' as const;
export const NODES = 'nodes' as const;
