/**
 * The freshness headers of a data response: `sluice-cache` (the generation that answered), `sluice-checkpoint`
 * and `sluice-position`, formatted once per commit rather than once per request. Moved out of app.ts.
 */
import type { CommitState } from '@sluice/core';
import type { FastifyReply } from 'fastify';
import { formatPositionHeader, POSITION_HEADER } from './freshness.js';
import type { Generation, Lease } from './serving-table.js';

/** Response header naming the concrete cache generation that answered. */
export const CACHE_HEADER = 'sluice-cache';
/** Response header with the commit checkpoint of that cache (read before the data, so data ⊇ checkpoint). */
export const CHECKPOINT_HEADER = 'sluice-checkpoint';
/** Longest time a `sluice-checkpoint` value is reused before the cache's commit state is read again. */
export const CHECKPOINT_REFRESH_MS = 50;

/**
 * Formats the `sluice-checkpoint` header: `epoch=<n>, at="<checkpoint instant>", committed-at="<instant>"`
 * (an RFC 8941 dictionary), or `none` for a cache that has not committed a checkpoint yet.
 *
 * @example
 * ```ts
 * reply.header(CHECKPOINT_HEADER, formatCheckpointHeader(cache.commitState()));
 * ```
 */
export function formatCheckpointHeader(state: Readonly<CommitState>): string {
  const checkpoint = state.checkpoint;
  if (!checkpoint) return state.committedAt ? `none, committed-at="${state.committedAt}"` : 'none';
  const committed = state.committedAt ? `, committed-at="${state.committedAt}"` : '';
  return `epoch=${checkpoint.epoch}, at="${checkpoint.at}"${committed}`;
}

/** Sets the checkpoint headers on replies; each application has its own (the caches are per app). */
/** The freshness header values of one commit state: `sluice-checkpoint` and `sluice-position` (null: none). */
export interface CheckpointHeaderValues {
  readonly header: string;
  readonly position: string | null;
}

export interface CheckpointStamps {
  /** The header values of `state`, formatted once per commit state object. */
  headersOf(state: Readonly<CommitState>): CheckpointHeaderValues;
  /** The headers of `state`, the commit state read in the snapshot of the data the reply carries. */
  stampState(reply: FastifyReply, state: Readonly<CommitState>): void;
  /** The headers of the leased generation (its commit state re-read at most every CHECKPOINT_REFRESH_MS). */
  stamp(reply: FastifyReply, lease: Lease): void;
}

export function checkpointStamps(): CheckpointStamps {
  // The checkpoint header of a data response is formatted once per commit: the cache hands out one commit-state
  // object per commit, read in the snapshot of the data it is sent with.
  const checkpointHeaders = new WeakMap<object, CheckpointHeaderValues>();
  const headersOf = (state: Readonly<CommitState>): CheckpointHeaderValues => {
    let headers = checkpointHeaders.get(state);
    if (headers === undefined) {
      headers = { header: formatCheckpointHeader(state), position: formatPositionHeader(state.checkpoint) };
      checkpointHeaders.set(state, headers);
    }
    return headers;
  };
  const stampState = (reply: FastifyReply, state: Readonly<CommitState>): void => {
    const headers = headersOf(state);
    reply.header(CHECKPOINT_HEADER, headers.header);
    if (headers.position !== null) reply.header(POSITION_HEADER, headers.position);
  };
  // Other responses (endpoint info, counts) re-read the commit state at most every CHECKPOINT_REFRESH_MS per
  // generation, always before the data they are sent with, so "the data is at least as fresh" holds.
  const checkpoints = new WeakMap<Generation, { header: string; position: string | null; readAt: number }>();
  const stamp = (reply: FastifyReply, lease: Lease): void => {
    const now = performance.now();
    let cached = checkpoints.get(lease.generation);
    if (!cached || now - cached.readAt > CHECKPOINT_REFRESH_MS) {
      const state = lease.cache.commitState();
      cached = {
        header: formatCheckpointHeader(state),
        position: formatPositionHeader(state.checkpoint),
        readAt: now,
      };
      checkpoints.set(lease.generation, cached);
    }
    reply.header(CACHE_HEADER, lease.generation.name);
    reply.header(CHECKPOINT_HEADER, cached.header);
    if (cached.position !== null) reply.header(POSITION_HEADER, cached.position);
  };
  return { headersOf, stampState, stamp };
}
