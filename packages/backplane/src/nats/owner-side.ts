/**
 * The owner side of the NATS backplane: how this process answers "who runs X?" and "stop X" requests for the
 * transfers it serves. Moved out of nats-backplane.ts; `NatsBackplane.serve` subscribes and hands each request
 * here.
 */
import type { Msg } from '@nats-io/transport-node';
import type { Logger } from '@sluice/core';
import type { LocalRegistry } from '../shared/local-registry.js';
import { decodeJson, InstanceQuerySchema, logDropped } from '../shared/wire.js';
import { Subjects } from './subjects.js';

/** The last token of a transfer subject: what is asked. */
export const ACTIONS = { owner: 'owner', terminate: 'terminate' } as const;

/** What answering needs: the responders this process serves, and its identity for `terminated.by`. */
export interface OwnerSide {
  registry: LocalRegistry;
  nodeId: string;
  logger: Logger;
  /** Largest reply in bytes; a bigger one is replaced by an error reply. */
  maxBytes: number;
}

function respond(side: OwnerSide, msg: Msg, body: unknown): void {
  const json = JSON.stringify(body);
  try {
    if (Buffer.byteLength(json) > side.maxBytes) {
      msg.respond(JSON.stringify({ ok: false, error: `reply exceeds ${side.maxBytes} bytes` }));
    } else {
      msg.respond(json);
    }
  } catch (err) {
    side.logger.warn({ err, subject: msg.subject }, 'could not answer a backplane request');
  }
}

/**
 * Answers one request on a transfer's subjects (`owner` or `terminate`) from this process's registry. A request
 * without a reply subject or with an unknown action is logged and dropped.
 */
export function answerTransferRequest(side: OwnerSide, transferId: string, msg: Msg): void {
  const action = Subjects.lastToken(msg.subject);
  if (!msg.reply) {
    logDropped(side.logger, msg.subject, 'request without a reply subject', msg.data);
    return;
  }
  // A registration being closed stays silent instead of answering "not here": another node may own it now.
  if (!side.registry.has(transferId)) return;
  if (action === ACTIONS.owner) {
    try {
      respond(side, msg, { ok: true, owner: side.registry.report(transferId) });
    } catch (err) {
      side.logger.error({ err, transferId }, 'responder produced an invalid owner report');
      respond(side, msg, { ok: false, error: 'the owner produced an invalid report' });
    }
    return;
  }
  if (action === ACTIONS.terminate) {
    side.registry.terminate(transferId).then(
      (stopped) => {
        if (stopped) respond(side, msg, { ok: true, terminated: true, by: side.nodeId });
      },
      (err: unknown) => {
        side.logger.error({ err, transferId }, 'terminating a transfer failed');
        respond(side, msg, { ok: false, error: `the owner failed to stop: ${(err as Error).message}` });
      },
    );
    return;
  }
  logDropped(side.logger, msg.subject, `unknown action "${action}"`, msg.data);
}

/**
 * Answers one request on this instance's subjects: which transfer is asked about comes in the body. Unlike a
 * transfer's own subject, the instance answers "not running" explicitly — it is the instance the asker's record
 * names as the owner at the epoch it read, so "not here" is as certain as "no responders" on a transfer subject.
 */
export function answerInstanceRequest(side: OwnerSide, msg: Msg): void {
  const action = Subjects.lastToken(msg.subject);
  if (!msg.reply) {
    logDropped(side.logger, msg.subject, 'request without a reply subject', msg.data);
    return;
  }
  const query = decodeJson(msg.data, InstanceQuerySchema, side.maxBytes);
  if (!query.ok) {
    logDropped(side.logger, msg.subject, query.reason, msg.data);
    respond(side, msg, { ok: false, error: `malformed request (${query.reason})` });
    return;
  }
  const transferId = query.value.id;
  if (action === ACTIONS.owner) {
    let owner: ReturnType<LocalRegistry['report']>;
    try {
      owner = side.registry.report(transferId);
    } catch (err) {
      side.logger.error({ err, transferId }, 'responder produced an invalid owner report');
      respond(side, msg, { ok: false, error: 'the owner produced an invalid report' });
      return;
    }
    respond(side, msg, owner ? { ok: true, owner } : { ok: true, running: false });
    return;
  }
  if (action === ACTIONS.terminate) {
    side.registry.terminate(transferId).then(
      (stopped) =>
        respond(
          side,
          msg,
          stopped ? { ok: true, terminated: true, by: side.nodeId } : { ok: true, running: false },
        ),
      (err: unknown) => {
        side.logger.error({ err, transferId }, 'terminating a transfer failed');
        respond(side, msg, { ok: false, error: `the owner failed to stop: ${(err as Error).message}` });
      },
    );
    return;
  }
  logDropped(side.logger, msg.subject, `unknown action "${action}"`, msg.data);
}
