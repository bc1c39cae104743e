import { type JetStreamClient, jetstream } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import { type NatsConfig, type PipelineCheckpoint, SinkError } from '@sluice/core';
import { connectNats } from '../nats.js';
import { keyOf, keyString, type RecordOp } from '../ops.js';
import { OP_HEADER } from '../sources/jetstream.js';
import type { PipelineSink } from '../types.js';

export interface JetStreamSinkOptions {
  handle: string;
  nats: NatsConfig;
  subject: string;
  /** Key fields: the dedupe id is `<writerId>:<key>`. Without them the record's source location is used. */
  key?: string[];
  /** The transfer id. */
  writerId: string;
  /** Publishes in flight before waiting for acknowledgements. Default 1024. */
  maxInFlight?: number;
}

/**
 * Publishes each record to a subject with `Nats-Msg-Id` = transfer id + record key, so a resumed transfer
 * duplicates nothing within the stream's duplicate window. Every publish is acknowledged before the epoch
 * commits, so the checkpoint never runs ahead of the stream.
 *
 * @example
 * ```ts
 * createJetStreamSink({ handle: 't1.sink', nats: url, subject: 'orders.copy', key: ['id'], writerId: 't1' });
 * ```
 */
export function createJetStreamSink(options: JetStreamSinkOptions): PipelineSink {
  const maxInFlight = options.maxInFlight ?? 1024;
  const encoder = new TextEncoder();
  let nc: NatsConnection | null = null;
  let js: JetStreamClient | null = null;
  let inFlight: Array<Promise<unknown>> = [];

  const settle = async () => {
    const batch = inFlight;
    inFlight = [];
    try {
      await Promise.all(batch);
    } catch (err) {
      throw new SinkError(`JetStream publish to ${options.subject} failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
  };
  const dedupeId = (op: RecordOp): string => {
    const key = op.op === 'delete' ? op.key : options.key ? keyOf(op.record, options.key) : undefined;
    if (key !== undefined) return `${options.writerId}:${keyString(key)}`;
    if (op.at?.offset !== undefined || op.at?.line !== undefined)
      return `${options.writerId}:${op.at.source}@${op.at.offset ?? op.at.line}`;
    throw new SinkError('A JetStream sink needs "key" fields to derive dedupe ids');
  };

  return {
    handle: options.handle,
    description: { type: 'jetstream', subject: options.subject, key: options.key ?? null },
    keyFields: options.key ?? [],
    keepsCheckpoint: false,
    committed: async () => null,
    async prepare() {
      try {
        nc = await connectNats(options.nats, `sluice-sink-${options.handle}`);
        js = jetstream(nc);
      } catch (err) {
        throw new SinkError(`Cannot connect to NATS: ${(err as Error).message}`, { cause: err });
      }
    },
    async write(ops: RecordOp[]) {
      for (const op of ops) {
        const msgID = dedupeId(op);
        if (op.op === 'delete') {
          const h = headers();
          h.set(OP_HEADER, 'delete');
          const record: Record<string, unknown> = {};
          options.key?.forEach((k, i) => {
            record[k] = op.key[i];
          });
          inFlight.push(
            js!.publish(options.subject, encoder.encode(JSON.stringify(record)), { msgID, headers: h }),
          );
        } else
          inFlight.push(js!.publish(options.subject, encoder.encode(JSON.stringify(op.record)), { msgID }));
        if (inFlight.length >= maxInFlight) await settle();
      }
    },
    async commit(_checkpoint: PipelineCheckpoint) {
      await settle();
    },
    async finish() {
      await settle();
    },
    async close() {
      await Promise.allSettled(inFlight);
      inFlight = [];
      const c = nc;
      nc = null;
      await c?.drain().catch(() => {});
    },
  };
}
