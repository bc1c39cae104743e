import { DeliverPolicy, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { type NatsConfig, SourceError } from '@sluice/core';
import { z } from 'zod';
import type { BadRecordReport } from '../bad-records.js';
import { inexactNumber } from '../json-numbers.js';
import { connectNats } from '../nats.js';
import { keyOf, type RecordOp, type Row } from '../ops.js';
import type { PipelineSource, ReadOptions, ResumeCheck, SourceItem } from '../types.js';

export const JetStreamPositionSchema = z.object({
  /** Stream sequence of the last message read (0 = none). */
  seq: z.number().int().nonnegative(),
  /** The stream's creation time: a recreated stream of the same name is another stream. */
  created: z.string(),
  read: z.number().int().nonnegative(),
});
export type JetStreamPosition = z.output<typeof JetStreamPositionSchema>;

/** Header marking a message as a delete of the record's key. */
export const OP_HEADER = 'Sluice-Op';

export interface JetStreamSourceOptions {
  handle: string;
  nats: NatsConfig;
  stream: string;
  subject: string;
  /** Key fields, needed to turn `Sluice-Op: delete` messages into deletes. */
  key?: string[];
  /** How long one fetch waits for messages. Default 1 s. */
  fetchExpiresMs?: number;
}

/**
 * A JetStream stream read with an ordered consumer from a start sequence. It resumes from the next
 * sequence while the stream still retains it, and says it cannot resume once the stream discarded it (or
 * was recreated) — the natural from-scratch case. The snapshot is everything up to the last sequence at start.
 *
 * @example
 * ```ts
 * createJetStreamSource({ handle: 'items.source', nats: 'nats://127.0.0.1:4222', stream: 'ITEMS', subject: 'items.>' });
 * ```
 */
export function createJetStreamSource(options: JetStreamSourceOptions): PipelineSource {
  /** Consumers of reads in progress (deleted by `close`). */
  const active = new Set<{ delete(): Promise<boolean> }>();
  let nc: NatsConnection | null = null;
  let jsm: JetStreamManager | null = null;
  let lastSeq = 0;
  let readSeq = 0;
  const decoder = new TextDecoder();

  const manager = async () => {
    if (jsm) return jsm;
    try {
      nc = await connectNats(options.nats, `sluice-source-${options.handle}`);
      jsm = await jetstreamManager(nc);
    } catch (err) {
      throw new SourceError(`Cannot connect to NATS for ${options.handle}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    return jsm;
  };
  const streamInfo = async () => {
    const m = await manager();
    try {
      return await m.streams.info(options.stream);
    } catch (err) {
      throw new SourceError(`Stream ${options.stream} is not available: ${(err as Error).message}`, {
        cause: err,
      });
    }
  };

  async function canResume(raw: unknown): Promise<ResumeCheck> {
    const parsed = JetStreamPositionSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, reason: 'the checkpointed stream position is malformed' };
    let info: Awaited<ReturnType<typeof streamInfo>>;
    try {
      info = await streamInfo();
    } catch (err) {
      return { ok: false, reason: (err as Error).message };
    }
    if (info.created !== parsed.data.created)
      return { ok: false, reason: `stream ${options.stream} was recreated` };
    const next = parsed.data.seq + 1;
    if (info.state.first_seq > next && info.state.messages > 0)
      return {
        ok: false,
        reason: `stream ${options.stream} no longer retains sequence ${next} (first retained: ${info.state.first_seq})`,
      };
    if (info.state.messages === 0 && info.state.last_seq > parsed.data.seq)
      return { ok: false, reason: `stream ${options.stream} was purged past sequence ${parsed.data.seq}` };
    return { ok: true };
  }

  /**
   * The stream skipped from `after` to a later sequence (delivered messages are in order; the skipped ones are other
   * subjects', deleted ones, or discarded ones). When the stream no longer holds `after + 1`, messages past the
   * position may have been discarded before they were read — a stream with limits (`max_msgs`, `max_bytes`,
   * `max_age`) that took more than it keeps while the reader was paused, or a purge. Going on would serve without
   * them; the read fails instead, as `canResume` then refuses the position, and the endpoint builds a new generation
   * from what the stream holds. Like `canResume` it cannot tell whether a discarded message was on the subject read.
   */
  const refuseDiscarded = async (after: number) => {
    const info = await streamInfo();
    const firstRetained = info.state.first_seq;
    if (firstRetained <= after + 1) return;
    throw new SourceError(
      `Stream ${options.stream} discarded messages after sequence ${after} before they were read (it holds sequences from ${firstRetained} on): the read does not go on without them`,
      { details: { stream: options.stream, after, firstRetained } },
    );
  };

  const toOp = (data: Uint8Array, seq: number, isDelete: boolean): RecordOp | BadRecordReport => {
    const at = { source: options.handle, offset: seq };
    let value: unknown;
    const text = decoder.decode(data);
    try {
      value = JSON.parse(text);
    } catch (err) {
      return { ...at, reason: `malformed JSON: ${(err as Error).message}` };
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      return { ...at, reason: 'a message must be a JSON object' };
    const inexact = inexactNumber(text);
    if (inexact !== null) return { ...at, reason: inexact };
    if (isDelete) {
      const key = options.key ? keyOf(value as Row, options.key) : undefined;
      if (key === undefined) return { ...at, reason: 'a delete message needs the key fields' };
      return { op: 'delete', key, at };
    }
    return { op: 'upsert', record: value as Row, at };
  };

  async function* read(from: unknown | null, readOptions: ReadOptions): AsyncGenerator<SourceItem> {
    const info = await streamInfo();
    const js = jetstream(nc!);
    let position: JetStreamPosition =
      from === null ? { seq: 0, created: info.created, read: 0 } : JetStreamPositionSchema.parse(from);
    const endSeq = info.state.last_seq;
    lastSeq = endSeq;
    /**
     * Whether a skipped sequence can be a loss: a resumed read continues from its checkpoint, so from the first
     * message on; a fresh read starts at whatever the stream holds when its first message comes.
     */
    let started = from !== null;
    readSeq = position.seq;
    let snapshotDone = false;
    if (position.seq >= endSeq || info.state.messages === 0) {
      snapshotDone = true;
      yield { kind: 'snapshot-done', position };
      if (readOptions.mode === 'transfer') return;
    }
    const consumer = await js.consumers.get(options.stream, {
      filter_subjects: options.subject,
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: Math.max(1, position.seq + 1),
    });
    active.add(consumer);
    try {
      while (!readOptions.signal.aborted) {
        const messages = await consumer.fetch({
          max_messages: readOptions.batchSize,
          expires: options.fetchExpiresMs ?? 1_000,
        });
        const ops: RecordOp[] = [];
        const bad: BadRecordReport[] = [];
        let pending = -1;
        let count = 0;
        /** The last sequence read before the batch's first skipped sequence, if any was skipped. */
        let skippedAfter: number | null = null;
        for await (const m of messages) {
          if (started && skippedAfter === null && m.seq > position.seq + 1) skippedAfter = position.seq;
          started = true;
          count++;
          pending = m.info.pending;
          const result = toOp(m.data, m.seq, m.headers?.get(OP_HEADER) === 'delete');
          if ('reason' in result) bad.push(result);
          else ops.push(result);
          position = { ...position, seq: m.seq, read: position.read + 1 };
        }
        // Before anything of the batch is handed on: a skipped sequence the stream no longer holds may have been
        // one of ours, discarded unread.
        if (skippedAfter !== null) await refuseDiscarded(skippedAfter);
        readSeq = position.seq;
        lastSeq = Math.max(lastSeq, position.seq + Math.max(0, pending));
        if (count > 0) yield { kind: 'records', ops, bad, read: count, position };
        if (!snapshotDone && (count === 0 || pending === 0 || position.seq >= endSeq)) {
          snapshotDone = true;
          yield { kind: 'snapshot-done', position };
          if (readOptions.mode === 'transfer') return;
        }
      }
    } finally {
      if (active.delete(consumer)) await consumer.delete().catch(() => {});
    }
  }

  return {
    handle: options.handle,
    description: {
      type: 'jetstream',
      stream: options.stream,
      subject: options.subject,
      key: options.key ?? null,
    },
    canResume,
    read,
    lag: () => Math.max(0, lastSeq - readSeq),
    close: async () => {
      // A reader parked in a fetch would only delete its consumer after the connection is gone: delete them here
      // first, so a stopped pipeline leaves nothing on the stream.
      const consumers = [...active];
      active.clear();
      await Promise.all(consumers.map((consumer) => consumer.delete().catch(() => {})));
      const c = nc;
      nc = null;
      jsm = null;
      await c?.drain().catch(() => {});
    },
  };
}
