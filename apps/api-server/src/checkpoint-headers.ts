/**
 * The freshness headers of a data response: `sluice-cache` (the generation that answered), `sluice-checkpoint`
 * and `sluice-position`, formatted once per commit rather than once per request. Moved out of app.ts.
 */
import type { CommitState } from '@sluice/core';
import type { FastifyReply } from 'fastify';
import { formatPositionHeader, POSITION_HEADER } from './freshness.js';
import type { Lease } from './serving-table.js';

/** Response header naming the concrete cache generation that answered. */
export const CACHE_HEADER = 'sluice-cache';
/** Response header with the commit checkpoint of that cache (read before the data, so data ⊇ checkpoint). */
export const CHECKPOINT_HEADER = 'sluice-checkpoint';
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

/** The freshness header values of one commit state: `sluice-checkpoint` and `sluice-position` (null: none). */
export interface CheckpointHeaderValues {
  readonly header: string;
  readonly position: string | null;
}

/** Sets the checkpoint headers on replies; each application has its own (the caches are per app). */
export interface CheckpointStamps {
  /** The header values of `state`, formatted once per commit state object. */
  headersOf(state: Readonly<CommitState>): CheckpointHeaderValues;
  /** The headers of `state`, the commit state read in the snapshot of the data the reply carries. */
  stampState(reply: FastifyReply, state: Readonly<CommitState>): void;
  /** The headers of the leased generation's latest commit (and `sluice-cache`). */
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
  // Other responses (endpoint info, counts, a feed's head) read the commit state when they are answered, before the
  // data they are sent with, so the data is at least as fresh as the headers — and never older than what the request
  // already saw (the position a sluice-min-position waited for). servingState is one object per commit, so this is a
  // byte comparison and a map lookup per request, not a decode.
  const stamp = (reply: FastifyReply, lease: Lease): void => {
    reply.header(CACHE_HEADER, lease.generation.name);
    stampState(reply, lease.cache.servingState());
  };
  return { headersOf, stampState, stamp };
}
