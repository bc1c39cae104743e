import type { PipelineCheckpoint } from '@sluice/core';
import { describe, expect, it } from 'vitest';
import { MAX_BACKOFF_MS, RetryBackoff } from './retry-backoff.js';

const HANDLE = 'items.source';
/** A checkpoint whose source position is `position` (other members as a run writes them). */
const at = (position: Record<string, unknown>, epoch = 1): PipelineCheckpoint => ({
  dag: 'dag',
  epoch,
  positions: { [HANDLE]: position, 'items.cache': { written: epoch } },
  at: new Date(epoch).toISOString(),
});

/** Fails `backoff` `n` times in a row; returns the waits it asked for. */
const failTimes = (backoff: RetryBackoff, n: number, now = 0) =>
  Array.from({ length: n }, () => {
    backoff.failed(now);
    return backoff.waitMs();
  });

describe('the back-off of a retried run', () => {
  it('doubles per failed attempt from the first wait up to the ceiling', () => {
    expect(failTimes(new RetryBackoff(1_000), 7)).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000,
    ]);
    expect(failTimes(new RetryBackoff(1_000), 200).at(-1)).toBe(MAX_BACKOFF_MS);
  });

  it('starts over once a run committed past where it started, not at a commit where it started', () => {
    const backoff = new RetryBackoff(1_000);
    failTimes(backoff, 6);
    const from = at({ lsn: '0/10', phase: 'stream', slot: 's' });
    backoff.started(0);
    // A resumed stream's `snapshot-done` commits the position it started from (its keys in another order).
    backoff.committed(from, at({ slot: 's', phase: 'stream', lsn: '0/10' }, 2), HANDLE);
    expect(backoff.attempts).toBe(6);
    backoff.committed(from, at({ lsn: '0/20', phase: 'stream', slot: 's' }, 3), HANDLE);
    expect(backoff.attempts).toBe(0);
    expect(backoff.failed(1)).toBe(1);
    expect(backoff.waitMs()).toBe(1_000);
  });

  it('a run that fails before it recovered is one more failed attempt; one that stayed up for the ceiling is not', () => {
    const backoff = new RetryBackoff(1_000);
    failTimes(backoff, 3);
    backoff.started(10_000);
    expect(backoff.failed(10_000 + MAX_BACKOFF_MS - 1)).toBe(4);
    backoff.started(100_000);
    // A quiet source commits nothing: up that long, it had recovered.
    expect(backoff.failed(100_000 + MAX_BACKOFF_MS)).toBe(1);
    expect(backoff.waitMs()).toBe(1_000);
  });

  it('counts the failed attempts a run under way has not recovered from, until it recovers or stays up the ceiling', () => {
    const backoff = new RetryBackoff(1_000);
    expect(backoff.unrecovered(0)).toBe(0);
    failTimes(backoff, 2);
    backoff.started(10);
    // Started, not recovered (waiting for its slot, say): still the attempt after two failures.
    expect(backoff.unrecovered(10 + MAX_BACKOFF_MS - 1)).toBe(2);
    expect(backoff.unrecovered(10 + MAX_BACKOFF_MS)).toBe(0);
    backoff.committed(at({ lsn: '0/10' }), at({ lsn: '0/20' }, 2), HANDLE);
    expect(backoff.unrecovered(20)).toBe(0);
  });

  it('a run from scratch recovers at its first commit', () => {
    const backoff = new RetryBackoff(1_000);
    failTimes(backoff, 2);
    backoff.started(0);
    backoff.committed(null, at({ lsn: '0/10', phase: 'snapshot', slot: 's' }), HANDLE);
    expect(backoff.attempts).toBe(0);
  });
});
