import {
  EndpointPhase,
  type EndpointPipeline,
  type EndpointPipelineStatus,
  type EndpointStatus,
  ErrorCode,
  type PipelinePhase,
  SluiceError,
} from '@sluice/core';

/** Why an attempt to start an endpoint's pipeline failed: its error code and message, and whether to try again. */
export interface StartFailure {
  code: string;
  message: string;
  /** The error says a retry may succeed (`details.retryable`: a lost connection): the app-server retries by itself. */
  retryable: boolean;
}

/**
 * Where the start of one configured endpoint is, on this node (its pipeline's supervisor keeps its runs going once
 * it started):
 * - `starting`: an attempt runs (the node's start, or an operator's Rebuild of a failed endpoint);
 * - `running`: the pipeline started;
 * - `retrying`: attempts failed for a reason that may pass (the source unreachable); the next is due at
 *   `nextAttemptAt` (null while one is under way);
 * - `failed`: an attempt failed for a reason that will not pass by itself: it waits for an operator's Rebuild;
 * - `stopped`: the node stops.
 */
export const StartPhase = {
  starting: 'starting',
  running: 'running',
  retrying: 'retrying',
  failed: 'failed',
  stopped: 'stopped',
} as const;
export type StartPhase = (typeof StartPhase)[keyof typeof StartPhase];

/** One endpoint's start: its phase and what that phase carries. */
export type EndpointStart =
  | { phase: typeof StartPhase.starting }
  | { phase: typeof StartPhase.running; pipeline: EndpointPipeline }
  | {
      phase: typeof StartPhase.retrying;
      failure: StartFailure;
      /** Failed attempts in a row. */
      attempts: number;
      /** When the next attempt is due (epoch ms); null while one is under way. */
      nextAttemptAt: number | null;
    }
  | { phase: typeof StartPhase.failed; failure: StartFailure }
  | { phase: typeof StartPhase.stopped };

/** Every legal move; anything else is a bug (thrown as `INTERNAL`). */
const TRANSITIONS: Record<StartPhase, readonly StartPhase[]> = {
  starting: ['running', 'retrying', 'failed', 'stopped'],
  // From here on the pipeline's own supervisor retries its runs.
  running: ['stopped'],
  // `retrying`: another attempt failed, or the next one is planned.
  retrying: ['retrying', 'running', 'failed', 'stopped'],
  // `starting`: an operator's Rebuild once the cause is fixed.
  failed: ['starting', 'stopped'],
  stopped: [],
};

/**
 * The move of endpoint `endpoint`'s start from `from` to `to`; an illegal one throws `INTERNAL`.
 *
 * @example
 * ```ts
 * start = moveStart('items', start, { phase: StartPhase.running, pipeline });
 * ```
 */
export function moveStart(endpoint: string, from: EndpointStart, to: EndpointStart): EndpointStart {
  if (!TRANSITIONS[from.phase].includes(to.phase))
    throw new SluiceError({
      code: ErrorCode.INTERNAL,
      message: `Endpoint "${endpoint}": illegal move of its start ${from.phase} → ${to.phase}`,
    });
  return to;
}

/** The start that follows a failed attempt from `from`: retried when the failure may pass, else failed. */
export function afterFailedAttempt(from: EndpointStart, failure: StartFailure): EndpointStart {
  if (!failure.retryable) return { phase: StartPhase.failed, failure };
  return from.phase === StartPhase.retrying
    ? // An attempt besides the planned ones (a Rebuild meanwhile): the planned one stays due.
      { ...from, failure, attempts: from.attempts + 1 }
    : { phase: StartPhase.retrying, failure, attempts: 1, nextAttemptAt: null };
}

/** A running pipeline's progress phase as the endpoint's (its supervisor retries every failed run). */
const RUN_PHASE: Record<PipelinePhase, EndpointPhase> = {
  starting: EndpointPhase.starting,
  snapshotting: EndpointPhase.snapshotting,
  streaming: EndpointPhase.streaming,
  completed: EndpointPhase.completed,
  failed: EndpointPhase.retrying,
  stopped: EndpointPhase.stopped,
};

/**
 * What `GET /v1/endpoints` shows of where an endpoint is — its phase, the failure and the retry — from its start
 * and, once it runs, its pipeline's status: the one place the shown phase is decided (the metric
 * `sluice_endpoint_phase` reads it too). A failure Sluice retries by itself (a start or a run) is `retrying`, never
 * `failed`, which is kept for what waits for an operator. A run waiting for its replication slot (`slotWait`) is
 * `retrying` when it is the attempt under way after failed ones (the pipeline then reports a `retry`), else
 * `starting` — never `streaming`, since nothing streams.
 *
 * @example
 * ```ts
 * const { phase, error, retry } = endpointPhase(start, start.phase === 'running' ? start.pipeline.status() : null);
 * ```
 */
export function endpointPhase(
  start: EndpointStart,
  run: EndpointPipelineStatus | null,
): Pick<EndpointStatus, 'phase' | 'error' | 'retry'> {
  switch (start.phase) {
    case StartPhase.starting:
      return { phase: EndpointPhase.starting, error: null, retry: null };
    case StartPhase.retrying:
      return {
        phase: EndpointPhase.retrying,
        error: shown(start.failure),
        retry: {
          attempts: start.attempts,
          nextAttemptAt: start.nextAttemptAt === null ? null : new Date(start.nextAttemptAt).toISOString(),
        },
      };
    case StartPhase.failed:
      return { phase: EndpointPhase.failed, error: shown(start.failure), retry: null };
    case StartPhase.stopped:
      return { phase: EndpointPhase.stopped, error: null, retry: null };
    case StartPhase.running: {
      if (run === null) return { phase: EndpointPhase.starting, error: null, retry: null };
      if (run.retry !== null) return { phase: EndpointPhase.retrying, error: run.error, retry: run.retry };
      if (run.held !== null) return { phase: EndpointPhase.held, error: run.error, retry: null };
      // Its run waits for its replication slot (another process streams it): nothing streams yet, whatever its
      // progress says (a resumed stream's snapshot was done before the wait began).
      if (run.slotWait !== null) return { phase: EndpointPhase.starting, error: run.error, retry: null };
      return { phase: RUN_PHASE[run.progress.phase], error: run.error, retry: null };
    }
  }
}

/** A failure as it is shown: its code and message. */
export function shown(failure: StartFailure): { code: string; message: string } {
  return { code: failure.code, message: failure.message };
}
