/**
 * Everything that crosses a process boundary is validated here: owner reports, replies, events. A message that
 * fails validation is never trusted; callers log it and drop it (or answer `unknown`).
 */
import type { Logger, OwnerReport, SluiceEvent } from '@sluice/core';
import { parseOrThrow, SluiceEventSchema, TransferIdSchema } from '@sluice/core';
import { z } from 'zod';

/** Largest message (event, report, reply) accepted or sent, in bytes. */
export const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024;

export const OwnerReportSchema = z.object({
  nodeId: z.string().min(1).max(256),
  address: z.string().max(2048),
  epoch: z.number().int().nonnegative(),
  progress: z.record(z.string(), z.unknown()).optional(),
});

/** Reply of an owner to an owner query. */
export const OwnerReplySchema = z.discriminatedUnion('ok', [
  z.object({ ok: z.literal(true), owner: OwnerReportSchema }),
  z.object({ ok: z.literal(false), error: z.string().max(4096) }),
]);
export type OwnerReply = z.output<typeof OwnerReplySchema>;

/** Reply of an owner to a terminate request, sent once the work has stopped. */
export const TerminateReplySchema = z.discriminatedUnion('ok', [
  z.object({ ok: z.literal(true), terminated: z.literal(true), by: z.string().min(1).max(256) }),
  z.object({ ok: z.literal(false), error: z.string().max(4096) }),
]);
export type TerminateReply = z.output<typeof TerminateReplySchema>;

/**
 * A query on an instance's subject (NATS backplane with `instanceId`): which transfer is meant travels in the body,
 * since one subscription answers for all of the instance's transfers.
 */
export const InstanceQuerySchema = z.object({ id: TransferIdSchema });

/** An instance's answer to "do you run X?": its report, or that it does not run X (then nobody does). */
export const InstanceOwnerReplySchema = z.union([
  z.object({ ok: z.literal(true), owner: OwnerReportSchema }),
  z.object({ ok: z.literal(true), running: z.literal(false) }),
  z.object({ ok: z.literal(false), error: z.string().max(4096) }),
]);

/** An instance's answer to "stop X": stopped (sent once the work has stopped), or it does not run X. */
export const InstanceTerminateReplySchema = z.union([
  z.object({ ok: z.literal(true), terminated: z.literal(true), by: z.string().min(1).max(256) }),
  z.object({ ok: z.literal(true), running: z.literal(false) }),
  z.object({ ok: z.literal(false), error: z.string().max(4096) }),
]);

/** Validates a transfer id the way the data plane does; a bad id is a `VALIDATION_FAILED` error. */
export function checkTransferId(transferId: unknown): string {
  return parseOrThrow(TransferIdSchema, transferId, 'Invalid transfer id');
}

const TimeoutSchema = z.number().int().min(1).max(600_000);

/** Validates a caller's wait in milliseconds (1 ms to 10 minutes). */
export function checkTimeout(timeoutMs: unknown): number {
  return parseOrThrow(TimeoutSchema, timeoutMs, 'Invalid timeoutMs');
}

/** Validates an owner report produced by a local responder before it is sent anywhere. */
export function checkOwnerReport(report: unknown): OwnerReport {
  return parseOrThrow(OwnerReportSchema, report, 'Invalid owner report') as OwnerReport;
}

/** Validates an event a caller wants to publish; a bad event is a `VALIDATION_FAILED` error. */
export function checkEvent(event: unknown): SluiceEvent {
  return parseOrThrow(SluiceEventSchema, event, 'Invalid event');
}

export type Decoded<T> = { ok: true; value: T } | { ok: false; reason: string };

/**
 * Decodes a JSON message against `schema` with a size limit; never throws.
 *
 * @example
 * ```ts
 * const decoded = decodeJson(msg.data, SluiceEventSchema, 65536);
 * if (!decoded.ok) logger.warn({ reason: decoded.reason }, 'dropped');
 * ```
 */
export function decodeJson<S extends z.ZodType>(
  data: Uint8Array | string,
  schema: S,
  maxBytes: number,
): Decoded<z.output<S>> {
  const size = typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength;
  if (size > maxBytes) return { ok: false, reason: `message of ${size} bytes exceeds ${maxBytes}` };
  let parsed: unknown;
  try {
    parsed = JSON.parse(typeof data === 'string' ? data : Buffer.from(data).toString('utf8'));
  } catch {
    return { ok: false, reason: 'not JSON' };
  }
  const result = schema.safeParse(parsed);
  if (!result.success) {
    const issue = result.error.issues[0];
    return {
      ok: false,
      reason: `schema: ${issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'invalid'}`,
    };
  }
  return { ok: true, value: result.data };
}

/** Logs a dropped message with enough context to find its sender, without logging the whole payload. */
export function logDropped(logger: Logger, where: string, reason: string, data: Uint8Array | string): void {
  const text = typeof data === 'string' ? data : Buffer.from(data.subarray(0, 200)).toString('utf8');
  logger.warn({ where, reason, preview: text.slice(0, 200) }, 'backplane dropped a malformed message');
}
