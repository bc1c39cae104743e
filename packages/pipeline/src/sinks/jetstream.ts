import {
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamClient,
  jetstream,
  jetstreamManager,
} from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import { type NatsConfig, type PipelineCheckpoint, SinkError, StaleEpochError } from '@sluice/core';
import { connectNats } from '../nats.js';
import { type RecordOp, sourcePosition } from '../ops.js';
import { setOwnField } from '../own.js';
import { OP_HEADER } from '../sources/jetstream.js';
import { type PipelineSink, type SinkFence, UNFENCED } from '../types.js';

export interface JetStreamSinkOptions {
  handle: string;
  nats: NatsConfig;
  subject: string;
  /**
   * The stream the request names: the subject must be one it takes (checked before anything is published), and
   * every publish expects it (`expect.streamName`), so a subject another stream takes is refused, never stored there.
   */
  stream?: string;
  /** Key fields, carried in delete messages (the dedupe id is the op's source position, never the key). */
  key?: string[];
  /** The transfer id. */
  writerId: string;
  /** Publishes in flight before waiting for acknowledgements. Default 1024. */
  maxInFlight?: number;
  /**
   * The run's fencing token. A stream cannot refuse a stale owner (it dedupes a replay only inside its
   * `duplicate_window`), so the sink asks {@link SinkFence.mayWrite} before each publish: an owner frozen past
   * that window stops at its first publish after it wakes up instead of storing the rest of its batch again
   * (what it had handed to its connection before the freeze still leaves: docs/fencing.md § A frozen JetStream
   * owner).
   */
  fence?: SinkFence;
}

/**
 * Refuses a subject no stream takes before anything is published. Its publishes would have no responder, which the
 * client reports as "jetstream is not enabled" — read as NATS being away, retried 20 times, then that misleading
 * message. A missing stream is the request's (or the operator's) to fix: not retryable. Anything else (NATS away)
 * stays retryable.
 */
async function checkSubjectStored(
  nc: NatsConnection,
  subject: string,
  stream: string | undefined,
): Promise<void> {
  let found: string;
  try {
    const jsm = await jetstreamManager(nc);
    found = await jsm.streams.find(subject);
  } catch (err) {
    const missing = err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound;
    throw new SinkError(
      missing
        ? `JetStream destination ${subject}: no stream takes this subject; create a stream for it, or name a subject one takes`
        : `Cannot look up the JetStream stream of ${subject}: ${(err as Error).message}`,
      { cause: err, ...(missing ? { details: { subject } } : { details: { retryable: true } }) },
    );
  }
  // Another stream taking the subject is the request's to fix too: publishing would fill a stream nobody named.
  if (stream !== undefined && found !== stream)
    throw new SinkError(
      `JetStream destination ${subject} is stored by stream ${found}, not by ${stream} as the request names; name a subject ${stream} takes`,
      { details: { subject, stream, storedBy: found } },
    );
}

/**
 * Publishes each record to a subject with `Nats-Msg-Id` = transfer id + the op's source position (file offset,
 * stream sequence, PostgreSQL keyset/cursor position), so a resumed or stale owner's replay duplicates nothing
 * within the stream's duplicate window and every later change to one key is a new message. Every publish is acknowledged before the epoch
 * commits, so the checkpoint never runs ahead of the stream.
 *
 * @example
 * ```ts
 * createJetStreamSink({ handle: 't1.sink', nats: url, subject: 'orders.copy', key: ['id'], writerId: 't1' });
 * ```
 */
export function createJetStreamSink(options: JetStreamSinkOptions): PipelineSink {
  const maxInFlight = options.maxInFlight ?? 1024;
  const fence = options.fence ?? UNFENCED;
  const encoder = new TextEncoder();
  let nc: NatsConnection | null = null;
  let js: JetStreamClient | null = null;
  let inFlight: Array<Promise<unknown>> = [];
  // The server refuses a publish the named stream would not store (the subject moved to another stream mid-run).
  const expectStream = options.stream !== undefined ? { streamName: options.stream } : {};

  const settle = async () => {
    const batch = inFlight;
    inFlight = [];
    try {
      await Promise.all(batch);
    } catch (err) {
      // Retryable: NATS restarting or unreachable is not the transfer's fault (the coordinator resumes it).
      throw new SinkError(`JetStream publish to ${options.subject} failed: ${(err as Error).message}`, {
        cause: err,
        details: { retryable: true },
      });
    }
  };
  // The transfer id plus the op's source position: a replay of the same op (a resumed or stale owner) is a
  // duplicate inside the stream's window, while a later change to the same key has another position and is
  // stored. A key-based id would drop every update and delete of a key after its first message.
  const dedupeId = (op: RecordOp): string => {
    const position = sourcePosition(op.at);
    if (position === undefined)
      throw new SinkError('A JetStream sink needs ops that carry their source position (dedupe ids)', {
        details: { handle: options.handle },
      });
    return `${options.writerId}:${position}`;
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
        throw new SinkError(`Cannot connect to NATS: ${(err as Error).message}`, {
          cause: err,
          details: { retryable: true },
        });
      }
      await checkSubjectStored(nc, options.subject, options.stream);
    },
    async write(ops: RecordOp[]) {
      for (const op of ops) {
        // Asked per publish, not per batch: a process frozen mid-batch resumes inside this loop, with acks in hand,
        // before the lease watchdog's timer can stop it (docs/fencing.md § JetStream).
        if (fence.mayWrite?.() === false)
          throw new StaleEpochError(options.writerId, fence.epoch, { details: { sink: options.handle } });
        const msgID = dedupeId(op);
        if (op.op === 'delete') {
          const h = headers();
          h.set(OP_HEADER, 'delete');
          const record: Record<string, unknown> = {};
          options.key?.forEach((k, i) => {
            setOwnField(record, k, op.key[i]);
          });
          inFlight.push(
            js!.publish(options.subject, encoder.encode(JSON.stringify(record)), {
              msgID,
              headers: h,
              expect: expectStream,
            }),
          );
        } else
          inFlight.push(
            js!.publish(options.subject, encoder.encode(JSON.stringify(op.record)), {
              msgID,
              expect: expectStream,
            }),
          );
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
