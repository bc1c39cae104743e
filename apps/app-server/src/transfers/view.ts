import type { PipelineProgress, TransferRecord, TransferView } from '@sluice/core';
import { z } from 'zod';

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
export function transferView(
  record: TransferRecord,
  local?: PipelineProgress | ProgressView | null,
): TransferView {
  return {
    id: record.id,
    mode: record.request.mode,
    state: record.state,
    owner: record.ownerNodeId === null ? null : { nodeId: record.ownerNodeId, address: record.ownerAddress },
    epoch: record.epoch,
    attempts: record.attempts,
    retries: record.retries,
    leaseExpiresAt: record.leaseExpiresAt ? record.leaseExpiresAt.toISOString() : null,
    finishing: record.state === 'IN_PROGRESS' && record.finishingEpoch === record.epoch,
    error: record.error,
    result: record.result,
    progress: local && record.state === 'IN_PROGRESS' ? progressView(local) : null,
    createdAt: record.createdAt.toISOString(),
    updatedAt: record.updatedAt.toISOString(),
    request: record.request,
  };
}

/** A transfer's progress as the API shows it. */
export type ProgressView = NonNullable<TransferView['progress']>;

/**
 * The shown part of a run's progress: what an owner serves on the backplane too, so another node's answer has the
 * same shape as the owner's.
 */
export function progressView(progress: PipelineProgress | ProgressView): ProgressView {
  return {
    phase: progress.phase,
    recordsRead: progress.recordsRead,
    recordsWritten: progress.recordsWritten,
    rate: progress.rate,
    ...(progress.replication ? { replication: progress.replication } : {}),
  };
}

// What another node's owner report carries under `progress.view` (free-form on the wire: checked here).
const ReportedProgressSchema = z.object({
  phase: z.string().max(64),
  recordsRead: z.number().nonnegative(),
  recordsWritten: z.number().nonnegative(),
  rate: z.number().nonnegative(),
  replication: z.record(z.string(), z.unknown()).nullable().optional(),
});

/** The progress an owner reported over the backplane, or null when it sent none (or an older node's form). */
export function reportedProgress(progress: Record<string, unknown> | undefined): ProgressView | null {
  const parsed = ReportedProgressSchema.safeParse(progress?.view);
  return parsed.success ? (parsed.data as ProgressView) : null;
}
