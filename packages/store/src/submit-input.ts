/**
 * What a submit writes, from its validated input: the insert's parameters, and the record they make (returned
 * as is when the insert wins on SQLite, where nothing else computed the row).
 */
import { type SubmitInput, type TransferRecord, type TransferRequest, ValidationError } from '@sluice/core';
import type { InsertNames } from './queries.js';
import { validHash, validLeaseMs, validOwner, validRequest, validSubmitState } from './validate.js';

/** The named parameters of submit's insert. */
export type SubmitValues = Record<InsertNames, string | number>;

/** A validated submit: its request and hash, the insert's parameters and the record they make. */
export interface PreparedSubmit {
  request: TransferRequest;
  requestHash: string;
  values: SubmitValues;
  fresh: TransferRecord;
}

/**
 * Validates a submit's input (each field with its own path), then prepares its insert at `clock()` (epoch ms, read
 * once the input is valid).
 *
 * @example
 * ```ts
 * const { values, fresh } = prepareSubmit({ request, requestHash: requestHash(request), owner, leaseMs: 30_000 }, () => Date.now());
 * ```
 */
export function prepareSubmit(input: SubmitInput, clock: () => number): PreparedSubmit {
  if (typeof input !== 'object' || input === null) {
    throw new ValidationError('Invalid submit input: expected an object', [
      { path: '(root)', message: 'expected an object' },
    ]);
  }
  const { request, json } = validRequest(input.request);
  const requestHash = validHash(input.requestHash);
  const owner = validOwner(input.owner);
  const leaseMs = validLeaseMs(input.leaseMs);
  const state = validSubmitState(input.state);
  const now = clock();
  const values: SubmitValues = {
    id: request.id,
    hash: requestHash,
    request: json,
    state,
    nodeId: owner.nodeId,
    address: owner.address,
    instance: owner.instanceId,
    leaseMs,
    now,
  };
  const fresh: TransferRecord = {
    id: request.id,
    requestHash,
    request,
    state,
    ownerNodeId: owner.nodeId,
    ownerAddress: owner.address,
    ownerInstance: owner.instanceId,
    epoch: 1,
    // This node's estimate; the row holds the store's own (PostgreSQL computes it with its clock).
    leaseExpiresAt: new Date(now + leaseMs),
    attempts: 1,
    retries: 0,
    finishingEpoch: null,
    error: null,
    result: null,
    checkpoint: null,
    createdAt: new Date(now),
    updatedAt: new Date(now),
  };
  return { request, requestHash, values, fresh };
}
