/**
 * The restart decision of an endpoint pipeline, as a pure function of what the launcher found (docs/architecture.md,
 * "restart cases"): case 1 continues a generation in place; case 4 (and 2–3, treated as 4) builds a generation from
 * scratch while the alias keeps pointing at the one that serves. No I/O here: the launcher opens the one generation
 * {@link restartCandidate} names, asks its checkpoints and sources whether they can resume, and hands the answer in.
 */
import type { CacheState, PipelineCheckpoint, SwitchCause } from '@sluice/core';

/** The restart cases an endpoint start (or rebuild) can land in. */
export const RestartCase = {
  /** Case 1: the alias target's checkpoints agree and every source can resume: continue it in place. */
  resumeInPlace: 'resume-in-place',
  /** Case 1 for an interrupted rebuild: the green generation newer than the alias target continues. */
  resumeRebuild: 'resume-rebuild',
  /** Case 4 into the interrupted green: it cannot be continued, so it is cleared and built again from scratch. */
  rebuildInGreen: 'rebuild-in-green',
  /** Case 4 into a new generation (the endpoint's first one, or a green beside the one serving). */
  rebuildNew: 'rebuild-new',
} as const;
export type RestartCase = (typeof RestartCase)[keyof typeof RestartCase];

/** What the alias table says about one generation of the endpoint. */
export interface GenerationFact {
  name: string;
  state: CacheState;
  createdAt: string;
  /** Why it was being built (its notes), for an interrupted rebuild to keep. */
  cause: SwitchCause | null;
}

/** Whether the candidate generation can be continued, as the launcher found out. */
export type GenerationAssessment =
  /** Opening it with today's schema was refused: the schema, key or indexes changed. */
  | { verdict: 'schema-changed'; message: string }
  /**
   * What its source reads changed under it (noted on the generation when a run stopped on it, or a source's
   * resume check found it): it cannot be continued, and what replaces it is a schema change.
   */
  | { verdict: 'source-changed'; reason: string }
  /** Its checkpoints agree, come from this DAG, and every source can resume from its position. */
  | { verdict: 'resumable'; checkpoint: PipelineCheckpoint; reason: string }
  /** It opened, but cannot be continued (no or inconsistent checkpoint, a source that cannot resume). */
  | { verdict: 'not-resumable'; reason: string }
  /**
   * Its files are gone or damaged (its directory removed by an operator or a clean-up, its `data.mdb` overwritten):
   * nothing can be continued or rebuilt in place, so a new generation is built from the source while the alias keeps
   * pointing where it did.
   */
  | { verdict: 'unusable'; reason: string };

/** The facts of one restart decision. */
export interface RestartFacts {
  /** An operator asked for a rebuild, or the last run's source changed under it (see `sourceChange`). */
  force: boolean;
  /**
   * Set when the rebuild is forced because the source changed under the last run (`SOURCE_SCHEMA_CHANGED`: a
   * dropped column, a recreated table): its message. The new generation's reason and switch cause say so
   * (`schema-change`), not "rebuild requested".
   */
  sourceChange?: string | null;
  /** The generation the endpoint's alias points at, or null. */
  aliasTarget: string | null;
  /** Every generation of this endpoint in the alias table. */
  generations: readonly GenerationFact[];
  /** The assessment of the generation {@link restartCandidate} named; null when it named none. */
  assessment: GenerationAssessment | null;
}

/** The one generation worth assessing: the alias target (`target`) or an interrupted rebuild (`green`). */
export type RestartCandidate = { role: 'target' | 'green'; name: string } | null;

/** The plan: which case, which generation, and why (the reason operators read in status and logs). */
export type EndpointRestartPlan =
  | { case: 'resume-in-place'; cache: string; checkpoint: PipelineCheckpoint; reason: string; cause: null }
  | {
      case: 'resume-rebuild';
      cache: string;
      checkpoint: PipelineCheckpoint;
      reason: string;
      cause: SwitchCause;
    }
  | { case: 'rebuild-in-green'; cache: string; reason: string; cause: SwitchCause }
  /** The launcher creates the generation and appends its name to `reason`. */
  | { case: 'rebuild-new'; reason: string; cause: SwitchCause };

/**
 * Which generation to assess. A green generation newer than the alias target means a rebuild was under way
 * (requested, forced by a source that could not resume, or a schema change) when the last run stopped: it takes
 * precedence over continuing in place, so a crash never silently drops a rebuild (the newest one; older ones
 * were superseded and are garbage collection's). Otherwise the alias target, unless a rebuild was requested.
 *
 * @example
 * ```ts
 * restartCandidate({ force: false, aliasTarget: 'items-01', generations }); // { role: 'target', name: 'items-01' }
 * ```
 */
export function restartCandidate(facts: Omit<RestartFacts, 'assessment'>): RestartCandidate {
  const green = newestGreen(facts);
  if (green) return { role: 'green', name: green.name };
  if (facts.aliasTarget !== null && !facts.force) return { role: 'target', name: facts.aliasTarget };
  return null;
}

/**
 * Decides how an endpoint (re)starts. A requested rebuild never continues a generation: an interrupted green
 * that cannot be continued is rebuilt in place, any other case gets a new generation.
 *
 * @example
 * ```ts
 * const plan = planRestart({ force: false, aliasTarget: 'items-01', generations, assessment });
 * if (plan.case === RestartCase.resumeInPlace) continueFrom(plan.checkpoint);
 * ```
 */
export function planRestart(facts: RestartFacts): EndpointRestartPlan {
  const candidate = restartCandidate(facts);
  const assessment = facts.assessment;
  const sourceChange = facts.force ? (facts.sourceChange ?? null) : null;
  const sourceChanged = (reason: string) => `the source changed (${reason})`;
  let cause: SwitchCause = sourceChange !== null ? 'schema-change' : facts.force ? 'rebuild' : 'restart';
  const requested = sourceChange !== null ? sourceChanged(sourceChange) : 'rebuild requested';
  if (candidate === null || assessment === null)
    return {
      case: RestartCase.rebuildNew,
      // Without a rebuild request there is no candidate only when the alias points nowhere yet.
      reason: facts.force ? requested : 'the endpoint has no cache yet',
      cause,
    };
  const changed = (message: string) => `the schema, key or indexes changed (${message})`;
  if (candidate.role === 'target') {
    if (assessment.verdict === 'resumable')
      return {
        case: RestartCase.resumeInPlace,
        cache: candidate.name,
        checkpoint: assessment.checkpoint,
        reason: `continuing in place in ${candidate.name}: ${assessment.reason}`,
        cause: null,
      };
    if (assessment.verdict === 'schema-changed')
      return { case: RestartCase.rebuildNew, reason: changed(assessment.message), cause: 'schema-change' };
    if (assessment.verdict === 'source-changed')
      return {
        case: RestartCase.rebuildNew,
        reason: sourceChanged(assessment.reason),
        cause: 'schema-change',
      };
    return { case: RestartCase.rebuildNew, reason: assessment.reason, cause };
  }
  const green = facts.generations.find((g) => g.name === candidate.name);
  // The interrupted rebuild keeps the cause it was started for.
  if (!facts.force && green?.cause) cause = green.cause;
  const why = facts.force ? requested : `a rebuild into ${candidate.name} was interrupted`;
  switch (assessment.verdict) {
    case 'resumable':
      if (facts.force) return { case: RestartCase.rebuildNew, reason: why, cause };
      return {
        case: RestartCase.resumeRebuild,
        cache: candidate.name,
        checkpoint: assessment.checkpoint,
        reason: `continuing the rebuild in ${candidate.name}: ${assessment.reason}`,
        cause,
      };
    case 'unusable':
      return {
        case: RestartCase.rebuildNew,
        reason: `${why} and cannot be continued (${assessment.reason})`,
        cause,
      };
    case 'not-resumable':
      return {
        case: RestartCase.rebuildInGreen,
        cache: candidate.name,
        reason: `${why}; rebuilding into ${candidate.name}`,
        cause,
      };
    case 'schema-changed':
      return {
        case: RestartCase.rebuildNew,
        reason: `${why} and cannot be continued (${changed(assessment.message)})`,
        cause: facts.force ? cause : 'schema-change',
      };
    case 'source-changed':
      return {
        case: RestartCase.rebuildNew,
        reason: `${why} and cannot be continued (${sourceChanged(assessment.reason)})`,
        cause: facts.force ? cause : 'schema-change',
      };
  }
}

function newestGreen(facts: Omit<RestartFacts, 'assessment'>): GenerationFact | null {
  const targetCreatedAt = facts.generations.find((g) => g.name === facts.aliasTarget)?.createdAt ?? '';
  let newest: GenerationFact | null = null;
  for (const g of facts.generations) {
    if (g.state !== 'building' || g.name === facts.aliasTarget || g.createdAt <= targetCreatedAt) continue;
    if (newest === null || g.createdAt > newest.createdAt) newest = g;
  }
  return newest;
}
