import { z } from 'zod';

/**
 * `transfers`: the app-server's transfer protocol: concurrency and queue bounds, lease and heartbeat timings,
 * the owner query and the sweeper, and the shutdown grace. `heartbeatMs < leaseMs` is checked in `rules.ts`.
 */
export const TransfersConfigSchema = z
  .strictObject({
    /** Transfers running at once on this node. */
    maxConcurrentTransfers: z.number().int().min(1).max(1024).default(4),
    /** Claimed transfers waiting for a slot; beyond it a submit gets 429 with `retry-after`. */
    queueSize: z.number().int().min(0).max(100_000).default(100),
    fireAndForgetConcurrency: z.number().int().min(1).max(1024).default(8),
    /** A transfer's lease; heartbeats extend it (one statement for all of a node's transfers). */
    leaseMs: z.number().int().min(500).max(3_600_000).default(15_000),
    heartbeatMs: z.number().int().min(100).max(600_000).default(5_000),
    /** How long "who runs X?" waits for the owner to answer. */
    ownerWaitMs: z.number().int().min(10).max(60_000).default(2_000),
    /** How often the sweeper recovers transfers whose lease expired. */
    sweepIntervalMs: z.number().int().min(100).max(600_000).default(5_000),
    /** How long running transfers get at shutdown to stop at a checkpoint (the processes exit soon after). */
    shutdownGraceMs: z.number().int().min(0).max(600_000).default(10_000),
  })
  .prefault({});
export type TransfersConfig = z.output<typeof TransfersConfigSchema>;
