import { z } from 'zod';
import type { ReplicationStatus } from './control-views.js';

/**
 * A pipeline checkpoint: the position of every DAG node at one commit epoch. `dag` is a hash of the node
 * handles and their configuration, so a checkpoint from another DAG shape never looks consistent.
 */
export const PipelineCheckpointSchema = z.object({
  dag: z.string().min(1),
  epoch: z.number().int().nonnegative(),
  /** Per node handle: that node's opaque position (a source's offset, a sink's committed epoch...). */
  positions: z.record(z.string(), z.unknown()),
  at: z.string(),
});
export type PipelineCheckpoint = z.output<typeof PipelineCheckpointSchema>;

export const PipelinePhase = {
  starting: 'starting',
  snapshotting: 'snapshotting',
  streaming: 'streaming',
  completed: 'completed',
  failed: 'failed',
  stopped: 'stopped',
} as const;
export type PipelinePhase = (typeof PipelinePhase)[keyof typeof PipelinePhase];

/** The restart decision of a pipeline (docs/architecture.md § Protocol 2, restart cases 1 and 4). */
export const RestartDecision = { resume: 'resume', fromScratch: 'from-scratch' } as const;
export type RestartDecision = (typeof RestartDecision)[keyof typeof RestartDecision];

/** Progress of a pipeline, exposed to logs, metrics and the control API. */
export interface PipelineProgress {
  phase: PipelinePhase;
  recordsRead: number;
  recordsWritten: number;
  badRecords: number;
  /** Records per second over the recent window. */
  rate: number;
  /**
   * How far the source is ahead of what was read, when the source can tell: bytes of a file, messages of a JetStream
   * stream (control-views' `LagUnit`); null otherwise.
   */
  lag: number | null;
  epoch: number;
  startedAt: string;
  /** A transfer reading logical replication: its slot, committed LSN and lag (absent for other sources). */
  replication?: ReplicationStatus | null;
}
