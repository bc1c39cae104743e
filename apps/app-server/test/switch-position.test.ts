/**
 * `sluice-position` never goes back across a blue/green switch of a logical-replication endpoint, as a client sees
 * it (docs/generations.md § The switch hands over at a position), through a real app-server and api-server process,
 * a private PostgreSQL with `wal_level=logical` and a writer committing to the source table the whole time: the
 * position each answer carries, and the `commit` positions of a change feed before and after its `switch`.
 *
 * The table is large enough that the rebuilt generation's snapshot takes seconds, while the serving generation goes
 * on following through its own slot — so when the snapshot is done, the serving one is ahead of it.
 */
import { freePort, startItemsWriter, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { itemsTable, replicatedEndpointYaml, startItemsHost } from './replication-node.js';
import { lastGenerationOtherThan, readContinuously, stepsBack } from './served-positions.js';

const postgres = logicalPostgresPerFile();

/** One parsed Server-Sent Event. */
interface FeedEvent {
  event: string;
  data: Record<string, unknown>;
}

/** Reads the change feed at `url` into `events` until the returned `close` is called. */
async function readFeed(url: string, events: FeedEvent[]): Promise<() => Promise<void>> {
  const controller = new AbortController();
  const response = await fetch(url, { headers: { accept: 'text/event-stream' }, signal: controller.signal });
  expect(response.status).toBe(200);
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  const done = (async () => {
    let buffer = '';
    for (;;) {
      const { value, done: ended } = await reader.read();
      if (ended) return;
      buffer += value;
      let end = buffer.indexOf('\n\n');
      while (end >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        end = buffer.indexOf('\n\n');
        const event = /^event: (.*)$/m.exec(frame)?.[1];
        const data = /^data: (.*)$/m.exec(frame)?.[1];
        if (event !== undefined && data !== undefined) events.push({ event, data: JSON.parse(data) });
      }
    }
  })().catch(() => {});
  return async () => {
    controller.abort();
    await done;
  };
}

describe('sluice-position across a rebuild under a writer', () => {
  it('defect: after a rebuild switched, answers and the change feed carried a position before the last one served', {
    timeout: 300_000,
  }, async () => {
    await using dir = await tempDir('sluice-switch-position-');
    const url = await itemsTable(postgres(), 'switchposition', { rows: 60_000, text: "repeat('x', 300)" });
    const apiPort = await freePort();
    const spec = {
      ...localNode('h1', dir.path),
      extraYaml: replicatedEndpointYaml(url, { apiPort, keepGenerations: true }),
      pipeline: { commitEveryRecords: 1000, commitEveryMs: 50 },
    };
    await using host = await startItemsHost(spec, { apiPort, records: 60_000, timeoutMs: 120_000 });
    const { node, api } = host;
    const blue = host.streaming.servingCache!;

    await using writer = startItemsWriter(url, 60_000);
    const feed: FeedEvent[] = [];
    const closeFeed = await readFeed(`${api}/v1/endpoints/items/changes`, feed);
    const reader = readContinuously(api);
    const answers = reader.answers;
    let green: string;
    try {
      await waitFor(() => writer.written >= 20 && answers.length >= 5, {
        timeoutMs: 30_000,
        what: `writes and answers (${writer.written} written, ${answers.length} answers)`,
      });
      expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
      green = await waitFor(lastGenerationOtherThan(answers, blue), {
        timeoutMs: 180_000,
        what: 'the api-server to answer from the rebuilt generation',
      });
      const at = answers.length;
      await waitFor(() => answers.length >= at + 20 && feed.some((e) => e.event === 'switch'), {
        timeoutMs: 60_000,
        what: 'answers from the rebuilt generation, and the feed to switch',
      });
      const switchAt = feed.findIndex((e) => e.event === 'switch');
      await waitFor(() => feed.slice(switchAt).filter((e) => e.event === 'commit').length >= 5, {
        timeoutMs: 60_000,
        what: 'commits on the feed after its switch',
      });
    } finally {
      await reader.stop();
      await writer.stop();
      await closeFeed();
    }

    expect(answers.some((a) => a.cache === blue)).toBe(true);
    expect(answers.at(-1)!.cache).toBe(green);
    expect(stepsBack(answers), 'sluice-position of the answers').toEqual([]);
    const switchAt = feed.findIndex((e) => e.event === 'switch');
    expect(feed[switchAt]!.data).toMatchObject({ from: blue, to: green });
    const commits = feed.flatMap((e) => {
      const lsn = (e.data.position as Record<string, { lsn?: string }> | null)?.['items.source']?.lsn;
      return e.event === 'commit' && lsn !== undefined ? [{ lsn }] : [];
    });
    expect(commits.length).toBeGreaterThan(5);
    expect(stepsBack(commits), 'commit positions of the change feed').toEqual([]);
  });
});
