/**
 * An endpoint fed from a JetStream stream with limits (`max_msgs`) reads messages the stream may discard before they
 * are read — say the app-server was paused while the stream took more than it keeps. Those messages are lost to the
 * endpoint; a restart already says so ("no longer retains sequence …") and builds a new generation from what the
 * stream holds. The running endpoint must not carry on past the gap as if nothing were missing.
 */

import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { WireNats } from '../chaos/nats-wire.js';
import { call, localNode, startNodeProcess } from './helpers.js';

/** Sorted ids as runs (`1–3, 19–23`), so a failure reads at a glance. */
function runs(ids: number[]): string {
  const out: string[] = [];
  for (let i = 0; i < ids.length; ) {
    let j = i;
    while (j + 1 < ids.length && ids[j + 1] === ids[j]! + 1) j++;
    out.push(i === j ? `${ids[i]}` : `${ids[i]}–${ids[j]}`);
    i = j + 1;
  }
  return out.join(', ');
}

describe('a JetStream source whose stream discards messages before they are read', {
  timeout: 120_000,
}, () => {
  it('defect: messages a max_msgs stream discarded while the endpoint was paused were skipped silently: the endpoint went on serving without them (a restart would have rebuilt)', async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-jetstream-gap-');
    await using wire = await WireNats.connect(nats.port);
    await wire.api('$JS.API.STREAM.CREATE.GAPPY', { name: 'GAPPY', subjects: ['gappy.>'], max_msgs: 5 });
    const publish = async (from: number, to: number) => {
      for (let id = from; id <= to; id++)
        await wire.request('gappy.items', { id, value: id * 1.5, category: 'a' });
    };
    await publish(1, 3);
    await using node = await startNodeProcess({
      ...localNode('h1', dir.path),
      nats: nats.url,
      extraYaml: [
        'endpoints:',
        '  - name: items',
        '    source: { type: jetstream, stream: GAPPY, subject: "gappy.>" }',
        '    primaryKey: [id]',
        '    fields: { id: integer, value: number, category: string }',
      ].join('\n'),
    });
    const servedIds = async (): Promise<number[]> => {
      const reader = await openCacheManager(join(dir.path, 'node', 'data'), { readOnly: true });
      try {
        const cache = await reader.openRo('items');
        try {
          const present: number[] = [];
          for (let id = 1; id <= 23; id++) if (cache.get([id]) !== undefined) present.push(id);
          return present;
        } finally {
          await cache.close();
        }
      } finally {
        await reader.close();
      }
    };
    /** Once the endpoint committed stream sequence `seq` with nothing building. */
    const committed = (seq: number) =>
      waitFor(
        async () => {
          const reply = await call(`${node.url}/v1/endpoints`);
          const items = reply.body.endpoints.find((e: { name: string }) => e.name === 'items');
          if (!items?.servingCache || items.buildingCache !== null || items.phase !== 'streaming')
            return null;
          return items.checkpoint?.positions?.['items.source']?.seq === seq ? items : null;
        },
        { timeoutMs: 60_000, intervalMs: 200, what: `the endpoint to commit stream sequence ${seq}` },
      );
    await committed(3);
    expect(runs(await servedIds())).toBe('1–3');

    // Paused longer than its pull waits (1 s), the app-server reads nothing while 20 messages come: the stream keeps
    // the last 5 (sequences 19–23) and discards 4–18 unread.
    node.child.kill('SIGSTOP');
    try {
      await new Promise((r) => setTimeout(r, 1_500));
      await publish(4, 23);
    } finally {
      node.child.kill('SIGCONT');
    }
    const info = await wire.api<{ state: { first_seq: number; last_seq: number } }>(
      '$JS.API.STREAM.INFO.GAPPY',
    );
    expect(info.state).toMatchObject({ first_seq: 19, last_seq: 23 });

    await committed(23);
    // What a restart (or another host starting now) builds from this stream: the messages it holds.
    expect(runs(await servedIds())).toBe('19–23');
    // Said, not silent: the run stopped at the gap, naming it.
    expect(node.child.output()).toContain(
      'Stream GAPPY discarded messages after sequence 3 before they were read (it holds sequences from 19 on)',
    );
  });
});
