import { hashJson, type PipelineCheckpoint } from '@sluice/core';
import type { PipelineSink, ResumeCheck, SourceBranch } from './types.js';

/**
 * The hash of a DAG's shape and configuration: node handles (derived from configuration, never random)
 * and what each node was configured with. Checkpoints from another DAG never look consistent.
 */
export function dagHash(branches: readonly SourceBranch[], sink: PipelineSink): string {
  return hashJson({
    branches: branches.map((b) => ({
      source: { handle: b.source.handle, description: b.source.description },
      processors: b.processors.map((p) => ({ handle: p.handle, description: p.description })),
    })),
    sink: { handle: sink.handle, description: sink.description },
  });
}

/** Every node handle of a DAG, sources first. */
export function nodeHandles(branches: readonly SourceBranch[], sink: PipelineSink): string[] {
  const handles = branches.flatMap((b) => [b.source.handle, ...b.processors.map((p) => p.handle)]);
  handles.push(sink.handle);
  return handles;
}

/** The restart decision and why; `checkpoint` is where a resume continues from. */
export interface RestartPlan {
  decision: 'resume' | 'from-scratch';
  reason: string;
  checkpoint: PipelineCheckpoint | null;
  /** From scratch because a source said what it reads changed ({@link ResumeCheck}'s `sourceChanged`). */
  sourceChanged?: boolean;
}

/**
 * Decides how a pipeline starts (docs/architecture.md § Protocol 2, restart cases): resume only when the pipeline checkpoint and
 * the sink's committed checkpoint agree, both come from this DAG, every node has a position, and every
 * source says it can continue from its position. Anything else starts from scratch, with the reason.
 *
 * A sink that commits its checkpoint with its data may be one epoch ahead of the pipeline checkpoint
 * (it committed, then the process died before the checkpoint was saved); its checkpoint then wins.
 *
 * @example
 * ```ts
 * const plan = await decideRestart({ dag, branches, sink, checkpoint: await port.load() });
 * logger.info(plan, 'restart decision');
 * ```
 */
export async function decideRestart(input: {
  dag: string;
  branches: readonly SourceBranch[];
  sink: PipelineSink;
  checkpoint: PipelineCheckpoint | null;
  sinkCheckpoint?: PipelineCheckpoint | null;
}): Promise<RestartPlan> {
  const { dag, branches, sink } = input;
  const fromScratch = (reason: string): RestartPlan => ({
    decision: 'from-scratch',
    reason,
    checkpoint: null,
  });
  let effective = input.checkpoint;
  if (sink.keepsCheckpoint) {
    const committed =
      input.sinkCheckpoint === undefined ? await sink.committed(input.checkpoint) : input.sinkCheckpoint;
    if (committed === null)
      return fromScratch(
        effective === null ? 'no checkpoint (first run)' : 'the sink has no committed checkpoint',
      );
    if (effective !== null && committed.dag === effective.dag && committed.epoch !== effective.epoch) {
      if (committed.epoch !== effective.epoch + 1)
        return fromScratch(
          `inconsistent checkpoints: pipeline at epoch ${effective.epoch}, sink at epoch ${committed.epoch}`,
        );
    } else if (effective !== null && committed.dag !== effective.dag)
      return fromScratch('inconsistent checkpoints: the sink committed for another DAG');
    effective = committed;
  }
  if (effective === null) return fromScratch('no checkpoint (first run)');
  if (effective.dag !== dag) return fromScratch('the DAG configuration changed since the checkpoint');
  for (const handle of nodeHandles(branches, sink)) {
    if (!Object.hasOwn(effective.positions, handle))
      return fromScratch(`inconsistent checkpoint: node "${handle}" has no position`);
  }
  for (const { source } of branches) {
    const position = effective.positions[source.handle];
    if (position === null) continue; // never read anything yet: starts at its beginning either way
    const check = await source.canResume(position);
    if (!check.ok)
      return {
        ...fromScratch(`source "${source.handle}" cannot resume: ${check.reason}`),
        ...(check.sourceChanged ? { sourceChanged: true } : {}),
      };
  }
  return {
    decision: 'resume',
    reason: `consistent checkpoint at epoch ${effective.epoch}`,
    checkpoint: effective,
  };
}
