import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { CheckpointPort, SluiceError, TransferRequest } from '@sluice/core';
import { type NatsServerHandle, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryCheckpointPort } from '../../test/helpers.js';
import { runTransfer } from '../transfer.js';

describe('JetStream sink dedupe ids name the source position, not the key', () => {
  let nats: NatsServerHandle;
  let nc: NatsConnection;
  beforeAll(async () => {
    nats = await startNatsServer();
    nc = await connect({ servers: nats.url });
  });
  afterAll(async () => {
    await nc?.close();
    await nats?.[Symbol.asyncDispose]();
  });

  /** Runs a JSONL → JetStream transfer of `lines` that must fail (through `checkpoint`, when given); its error. */
  async function failedJetStreamTransfer(
    dir: string,
    id: string,
    lines: string[],
    destination: { stream: string; subject: string },
    checkpoint: CheckpointPort = memoryCheckpointPort(),
  ): Promise<SluiceError | null> {
    const src = join(dir, `${id}.jsonl`);
    await writeFile(src, `${lines.join('\n')}\n`);
    const request: TransferRequest = {
      id,
      mode: 'idempotent',
      properties: {},
      source: { type: 'file', path: src, format: 'jsonl' },
      destination: { type: 'jetstream', ...destination },
      options: { onBadRecord: 'fail' },
    };
    return runTransfer(request, {
      checkpoint,
      connections: {},
      nats: nats.url,
      signal: new AbortController().signal,
    }).then(
      () => null,
      (e: unknown) => e as SluiceError,
    );
  }

  it('three updates to one key are three messages; a replay by a resumed run adds none', async () => {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'UPD', subjects: ['upd.>'], duplicate_window: 120_000_000_000 });
    // A raw core-NATS subscriber sees every physical publish, duplicates included.
    let published = 0;
    const sub = nc.subscribe('upd.items', {
      callback: () => {
        published++;
      },
    });
    await nc.flush();
    await using dir = await tempDir();
    const src = join(dir.path, 'in.jsonl');
    const lines = [
      { id: 1, v: 'a' },
      { id: 1, v: 'b' },
      { id: 2, v: 'x' },
      { id: 1, v: 'c' },
    ];
    await writeFile(src, lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
    const request: TransferRequest = {
      id: 'js-updates',
      mode: 'idempotent',
      source: { type: 'file', path: src, format: 'jsonl' },
      destination: { type: 'jetstream', stream: 'UPD', subject: 'upd.items', key: 'id' },
      properties: {},
      options: { onBadRecord: 'skip' },
    };
    const shared = { value: null as unknown, epoch: 0 };
    const first = await runTransfer(request, {
      checkpoint: memoryCheckpointPort({ shared, epoch: 1 }),
      connections: {},
      nats: nats.url,
      signal: new AbortController().signal,
      commitEveryRecords: 2,
    });
    expect(first.recordsWritten).toBe(4);
    expect((await jsm.streams.info('UPD')).state.messages).toBe(4);
    const values: string[] = [];
    const consumer = await jsm.jetstream().consumers.get('UPD');
    for await (const m of await consumer.fetch({ max_messages: 4, expires: 2000 })) {
      values.push(`${(m.json() as { id: number; v: string }).id}${(m.json() as { v: string }).v}`);
      if (values.length === 4) break;
    }
    expect(values).toEqual(['1a', '1b', '2x', '1c']);
    await waitFor(() => published === 4, { timeoutMs: 5_000, what: 'four publishes seen' });

    // A replay of the same source positions (a stale or resumed owner, here a from-scratch rerun at epoch 2)
    // is published again but stored as duplicates.
    const replay = await runTransfer(request, {
      checkpoint: memoryCheckpointPort({ epoch: 2 }),
      connections: {},
      nats: nats.url,
      signal: new AbortController().signal,
      commitEveryRecords: 2,
    });
    expect(replay.decision).toBe('from-scratch');
    await waitFor(() => published === 8, { timeoutMs: 5_000, what: 'the replay physically published' });
    expect((await jsm.streams.info('UPD')).state.messages).toBe(4);
    sub.unsubscribe();
  });

  it('defect: a JetStream sink went on publishing after its owner may no longer write (a lease run out mid-batch, an owner woken from a freeze): it stops at the first publish its fence refuses', async () => {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'FENCED', subjects: ['fenced.>'], duplicate_window: 120_000_000_000 });
    await using dir = await tempDir();
    // One batch of 100 records (one commit at the end); the owner may write 30 of them, then its lease is gone.
    let asked = 0;
    const checkpoint = Object.assign(memoryCheckpointPort({ epoch: 3 }), { mayWrite: () => ++asked <= 30 });
    const failed = await failedJetStreamTransfer(
      dir.path,
      'js-fenced',
      Array.from({ length: 100 }, (_, id) => JSON.stringify({ id })),
      { stream: 'FENCED', subject: 'fenced.items' },
      checkpoint,
    );
    expect(failed?.code).toBe('STALE_EPOCH');
    expect(failed?.details).toMatchObject({ expectedEpoch: 3, sink: 'js-fenced.sink' });
    expect((await jsm.streams.info('FENCED')).state.messages).toBe(30);
    // Nothing was committed: a successor resumes from the start, the stream dedupes the 30.
    expect(checkpoint.value).toBeNull();
  });

  it('defect: a subject no stream takes failed after 20 retries as "jetstream is not enabled" — now at once, naming the subject', async () => {
    await using dir = await tempDir();
    const err = await failedJetStreamTransfer(dir.path, 'js-no-stream', ['{"id":1}'], {
      stream: 'NOSUCH',
      subject: 'nosuch.items',
    });
    expect(err?.code, err?.message).toBe('SINK_FAILED');
    expect(err?.message).toMatch(/JetStream destination nosuch\.items: no stream takes this subject/);
    // Not retryable: the coordinator records it FAILED instead of resuming it again and again.
    expect(err?.details?.retryable).not.toBe(true);
  });

  it('defect: a destination naming one stream published into another stream that takes the subject, and COMPLETED', async () => {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'AUDIT', subjects: ['audit.>'] });
    await jsm.streams.add({ name: 'ORDERS_COPY', subjects: ['orders.copy.>'] });
    await using dir = await tempDir();
    // The subject belongs to AUDIT, not to the stream the request names.
    const err = await failedJetStreamTransfer(dir.path, 'js-wrong-stream', ['{"id":1}', '{"id":2}'], {
      stream: 'ORDERS_COPY',
      subject: 'audit.items',
    });
    expect({
      audit: (await jsm.streams.info('AUDIT')).state.messages,
      ordersCopy: (await jsm.streams.info('ORDERS_COPY')).state.messages,
    }).toEqual({ audit: 0, ordersCopy: 0 });
    expect(err?.code, err?.message).toBe('SINK_FAILED');
    expect(err?.message).toMatch(/audit\.items is stored by stream AUDIT, not by ORDERS_COPY/);
    expect(err?.details?.retryable).not.toBe(true);
  });
});
