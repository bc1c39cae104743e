/**
 * A JetStream address's subject is a NATS subject: tokens separated by ".", none empty, and a destination publishes
 * to one concrete subject — a wildcard (`*`, `>`) only filters what a source reads. A subject that breaks this is bad
 * input: refused at submit with 400 VALIDATION_FAILED at its path, nothing stored, nothing published.
 */
import { join } from 'node:path';
import { startNatsServer, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { StreamReader, WireNats } from '../chaos/nats-wire.js';
import { call, localNode, startNodeProcess, waitForState, writeRecords } from './helpers.js';

describe('JetStream subjects in transfer requests', { timeout: 90_000 }, () => {
  it('defect: a destination subject with a wildcard or an empty token was accepted (201) and stored; a wildcard one then published every record under the literal subject "orders.*", an empty-token one FAILED with "jetstream is not enabled"', async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-jetstream-subjects-');
    await using node = await startNodeProcess({ ...localNode('solo', dir.path), nats: nats.url });
    await using wire = await WireNats.connect(nats.port);
    const stream = new StreamReader(wire, 'ORDERS');
    await stream.create(['orders.>']);
    const source = await writeRecords(join(dir.path, 'data', 'orders.jsonl'), 3);
    const file = { type: 'file', path: source, format: 'jsonl' };
    const jetstream = (subject: string) => ({ type: 'jetstream', stream: 'ORDERS', subject });

    const cases: Array<{ id: string; source: unknown; destination: unknown; path: string }> = [
      { id: 'dest-star', source: file, destination: jetstream('orders.*'), path: 'destination.subject' },
      { id: 'dest-gt', source: file, destination: jetstream('orders.>'), path: 'destination.subject' },
      {
        id: 'dest-empty-token',
        source: file,
        destination: jetstream('orders..eu'),
        path: 'destination.subject',
      },
      {
        id: 'dest-trailing-dot',
        source: file,
        destination: jetstream('orders.'),
        path: 'destination.subject',
      },
      {
        id: 'dest-leading-dot',
        source: file,
        destination: jetstream('.orders'),
        path: 'destination.subject',
      },
      {
        id: 'source-empty-token',
        source: jetstream('orders..eu'),
        destination: { type: 'file', path: join(dir.path, 'out', 'a.jsonl'), format: 'jsonl' },
        path: 'source.subject',
      },
      {
        id: 'source-gt-not-last',
        source: jetstream('orders.>.eu'),
        destination: { type: 'file', path: join(dir.path, 'out', 'b.jsonl'), format: 'jsonl' },
        path: 'source.subject',
      },
    ];
    const answers: Record<string, string> = {};
    for (const c of cases) {
      const reply = await call(`${node.url}/v1/transfers`, {
        json: { id: c.id, mode: 'idempotent', source: c.source, destination: c.destination },
      });
      const paths = (reply.body?.errors ?? []).map((e: { path: string }) => e.path).join(',');
      answers[c.id] = `${reply.status} ${reply.body?.code ?? reply.body?.state} ${paths}`;
    }
    expect(answers).toEqual(Object.fromEntries(cases.map((c) => [c.id, `400 VALIDATION_FAILED ${c.path}`])));

    // A concrete subject still runs, and a wildcard still filters what a source reads.
    const good = await call(`${node.url}/v1/transfers`, {
      json: { id: 'dest-concrete', mode: 'idempotent', source: file, destination: jetstream('orders.eu') },
    });
    expect(good.status).toBe(201);
    await waitForState(node.url, 'dest-concrete', 'COMPLETED');
    const filtered = await call(`${node.url}/v1/transfers`, {
      json: {
        id: 'source-wildcard',
        mode: 'idempotent',
        source: jetstream('orders.*'),
        destination: { type: 'file', path: join(dir.path, 'out', 'all.jsonl'), format: 'jsonl' },
      },
    });
    expect(filtered.status).toBe(201);
    const read = await waitForState(node.url, 'source-wildcard', 'COMPLETED');
    expect(read.result).toMatchObject({ recordsRead: 3, recordsWritten: 3 });

    // Nothing of the refused requests was stored or published: the stream holds the concrete subject's 3 records.
    for (const c of cases) expect((await call(`${node.url}/v1/transfers/${c.id}`)).status).toBe(404);
    expect(Object.fromEntries(await stream.subjectCounts('>'))).toEqual({ 'orders.eu': 3 });
  });
});
