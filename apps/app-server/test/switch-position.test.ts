/**
 * `sluice-position` never goes back across a blue/green switch of a logical-replication endpoint, as a client sees
 * it (docs/generations.md § The switch hands over at a position), through a real app-server and api-server process,
 * a private PostgreSQL with `wal_level=logical` and a writer committing to the source table the whole time: the
 * position each answer carries, and the `commit` positions of a change feed before and after its `switch`.
 *
 * The table is large enough that the rebuilt generation's snapshot takes seconds, while the serving generation goes
 * on following through its own slot — so when the snapshot is done, the serving one is ahead of it.
 */
import { freePort, sql, startSourceWriter, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { itemsOf, lsnReached } from './held-replication.js';
import { call, localNode, startHostApiServer, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';

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

/** The LSN of `items.source` in a `sluice-position` header or a feed `commit`'s position, or null. */
function lsnIn(header: string | null): string | null {
  return header === null ? null : (/items\.source="([0-9A-F]+\/[0-9A-F]+)"/i.exec(header)?.[1] ?? null);
}

/** Indexes where an LSN is before the one just before it (PostgreSQL compares them). */
async function stepsBack(url: string, lsns: readonly string[]): Promise<Array<[string, string]>> {
  const out: Array<[string, string]> = [];
  for (let i = 1; i < lsns.length; i++)
    if (!(await lsnReached(url, lsns[i]!, lsns[i - 1]!))) out.push([lsns[i - 1]!, lsns[i]!]);
  return out;
}

describe('sluice-position across a rebuild under a writer', () => {
  it('defect: after a rebuild switched, answers and the change feed carried a position before the last one served', {
    timeout: 300_000,
  }, async () => {
    await using dir = await tempDir('sluice-switch-position-');
    const url = await postgres().createDatabase('switchposition');
    await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, s text)');
    await sql(url, "INSERT INTO items SELECT g, g, repeat('x', 300) FROM generate_series(1, 60000) g");
    const apiPort = await freePort();
    const api = `http://127.0.0.1:${apiPort}`;
    const extraYaml = [
      'connections:',
      `  db: { type: postgres, url: "${url}" }`,
      `api: { port: ${apiPort}, freshnessWaitMs: 5000 }`,
      'cache: { gcGraceMs: 3600000 }',
      'endpoints:',
      '  - name: items',
      '    source: { type: postgres, connection: db, table: items }',
      '    primaryKey: [id]',
      '    fields: { id: integer, v: integer, s: string }',
    ].join('\n');
    const spec = {
      ...localNode('h1', dir.path),
      extraYaml,
      pipeline: { commitEveryRecords: 1000, commitEveryMs: 50 },
    };
    await using node = await startNodeProcess(spec);
    await using apiServer = await startHostApiServer(node);
    const blue = (
      await waitFor(
        async () => {
          const items = await itemsOf(node);
          return items?.servingCache && items.records === 60_000 && items.replication?.committedLsn
            ? items
            : null;
        },
        { timeoutMs: 120_000, what: 'items to stream' },
      )
    ).servingCache!;
    await waitFor(async () => (await call(`${api}/v1/endpoints/items`)).status === 200, {
      timeoutMs: 60_000,
      what: 'the api-server to serve items',
    });

    await using writer = startSourceWriter(url, {
      initialRows: 60_000,
      firstNewId: 100_000,
      pauseMs: 2,
      transaction: ({ updates, added, removed }) => `DO $$ BEGIN
        UPDATE items SET v = v + 1 WHERE id IN (${updates.join(', ')});
        INSERT INTO items VALUES (${added}, 0, 'new');
        DELETE FROM items WHERE id = ${removed};
      END $$`,
    });
    const feed: FeedEvent[] = [];
    const closeFeed = await readFeed(`${api}/v1/endpoints/items/changes`, feed);
    // A client reading over and over, noting the generation and position of every answer.
    const answers: Array<{ cache: string; lsn: string }> = [];
    let reading = true;
    const reader = (async () => {
      while (reading) {
        const reply = await call(`${api}/v1/endpoints/items/query`, { json: { $limit: 1 } });
        const lsn = lsnIn(reply.headers.get('sluice-position'));
        const cache = reply.headers.get('sluice-cache');
        if (reply.status === 200 && lsn !== null && cache !== null) answers.push({ cache, lsn });
      }
    })();
    let green: string;
    try {
      await waitFor(() => writer.written >= 20 && answers.length >= 5, {
        timeoutMs: 30_000,
        what: `writes and answers (${writer.written} written, ${answers.length} answers)`,
      });
      expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
      green = await waitFor(
        () => {
          const last = answers.at(-1)?.cache;
          return last !== undefined && last !== blue ? last : null;
        },
        { timeoutMs: 180_000, what: 'the api-server to answer from the rebuilt generation' },
      );
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
      reading = false;
      await reader;
      await writer.stop();
      await closeFeed();
    }

    expect(answers.some((a) => a.cache === blue)).toBe(true);
    expect(answers.at(-1)!.cache).toBe(green);
    expect(
      await stepsBack(
        url,
        answers.map((a) => a.lsn),
      ),
      'sluice-position of the answers',
    ).toEqual([]);
    const switchAt = feed.findIndex((e) => e.event === 'switch');
    expect(feed[switchAt]!.data).toMatchObject({ from: blue, to: green });
    const commits = feed.flatMap((e) => {
      const lsn = (e.data.position as Record<string, { lsn?: string }> | null)?.['items.source']?.lsn;
      return e.event === 'commit' && lsn !== undefined ? [lsn] : [];
    });
    expect(commits.length).toBeGreaterThan(5);
    expect(await stepsBack(url, commits), 'commit positions of the change feed').toEqual([]);
    void apiServer;
  });
});
