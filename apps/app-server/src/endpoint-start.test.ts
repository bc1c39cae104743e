import type { EndpointPipeline, EndpointPipelineStatus } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import {
  afterFailedAttempt,
  type EndpointStart,
  endpointPhase,
  moveStart,
  StartPhase,
} from './endpoint-start.js';

const unreachable = { code: 'SOURCE_FAILED', message: 'Cannot connect to PostgreSQL', retryable: true };
const misconfigured = { code: 'REPLICA_IDENTITY_MISSING', message: 'no primary key', retryable: false };

/** A pipeline status with only what the phase is derived from set. */
const runStatus = (over: Partial<EndpointPipelineStatus>): EndpointPipelineStatus =>
  ({
    progress: { phase: 'streaming' },
    held: null,
    error: null,
    retry: null,
    slotWait: null,
    ...over,
  }) as EndpointPipelineStatus;
const running: EndpointStart = { phase: StartPhase.running, pipeline: {} as EndpointPipeline };

describe('an endpoint start', () => {
  it('is retried after a failure that may pass, and failed for good only after one that will not', () => {
    const first = afterFailedAttempt({ phase: StartPhase.starting }, unreachable);
    expect(first).toEqual({ phase: 'retrying', failure: unreachable, attempts: 1, nextAttemptAt: null });
    const planned = { ...first, nextAttemptAt: 5_000 } as EndpointStart;
    // A Rebuild's attempt meanwhile fails too: counted, and the planned attempt stays due.
    expect(afterFailedAttempt(planned, unreachable)).toMatchObject({ attempts: 2, nextAttemptAt: 5_000 });
    expect(afterFailedAttempt(planned, misconfigured)).toEqual({ phase: 'failed', failure: misconfigured });
  });

  it('moves only along its transition table', () => {
    expect(() =>
      moveStart('items', running, {
        phase: StartPhase.retrying,
        failure: unreachable,
        attempts: 1,
        nextAttemptAt: null,
      }),
    ).toThrow(/illegal move of its start running → retrying/);
    expect(() => moveStart('items', { phase: StartPhase.stopped }, { phase: StartPhase.starting })).toThrow(
      /INTERNAL|illegal/,
    );
    expect(
      moveStart(
        'items',
        { phase: StartPhase.failed, failure: misconfigured },
        { phase: StartPhase.starting },
      ),
    ).toEqual({
      phase: 'starting',
    });
  });

  it('is shown retrying (with its retry) while Sluice recovers by itself, failed only when an operator must act', () => {
    expect(
      endpointPhase(
        { phase: StartPhase.retrying, failure: unreachable, attempts: 3, nextAttemptAt: 0 },
        null,
      ),
    ).toEqual({
      phase: 'retrying',
      error: { code: 'SOURCE_FAILED', message: 'Cannot connect to PostgreSQL' },
      retry: { attempts: 3, nextAttemptAt: '1970-01-01T00:00:00.000Z' },
    });
    expect(endpointPhase({ phase: StartPhase.failed, failure: misconfigured }, null)).toMatchObject({
      phase: 'failed',
      retry: null,
    });
    // A running pipeline whose run failed and is retried by its supervisor: retrying, even while held.
    const retry = { attempts: 1, nextAttemptAt: null };
    const error = { code: 'SOURCE_FAILED', message: 'connection lost' };
    expect(
      endpointPhase(running, runStatus({ retry, error, held: { cache: 'g', reason: 'manual' } })),
    ).toEqual({ phase: 'retrying', error, retry });
    // Between the run's failure and the supervisor's bookkeeping the progress says failed: still retrying.
    expect(endpointPhase(running, runStatus({ progress: { phase: 'failed' } as never })).phase).toBe(
      'retrying',
    );
    expect(endpointPhase(running, runStatus({ held: { cache: 'g', reason: 'manual' } })).phase).toBe('held');
    expect(endpointPhase(running, runStatus({}))).toEqual({ phase: 'streaming', error: null, retry: null });
  });

  it('is never shown streaming while its run waits for its replication slot', () => {
    const slotWait = {
      slot: 'sluice_h1_items_source',
      since: '2026-12-06T18:45:00.000Z',
      until: '2026-12-06T18:45:15.000Z',
      activePid: 4242,
    };
    // A first wait (nothing failed before): the endpoint is starting.
    expect(endpointPhase(running, runStatus({ slotWait }))).toEqual({
      phase: 'starting',
      error: null,
      retry: null,
    });
    // The wait of the attempt under way after failed ones: still retrying, the retry with no next attempt due.
    const retry = { attempts: 2, nextAttemptAt: null };
    const error = { code: 'SOURCE_FAILED', message: 'Replication slot sluice_h1_items_source is in use' };
    expect(endpointPhase(running, runStatus({ slotWait, retry, error }))).toEqual({
      phase: 'retrying',
      error,
      retry,
    });
  });
});
