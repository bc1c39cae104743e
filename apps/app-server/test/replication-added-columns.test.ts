/**
 * A column added to a replicated table (no default: every row holds NULL there, and nothing streams until a row
 * changes), through a real app-server and a real api-server process sharing one configuration, against a private
 * PostgreSQL with `wal_level=logical`. The generation continues in place (nothing in it became wrong), so the new
 * column must become one of its fields — queryable, typed as a fresh generation would type it — as soon as the
 * change that carries it is committed, in the api-server that already has the generation open, and after a restart
 * that still resumes in place.
 */
import { freePort, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startHostApiServer, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { databaseWith, endpointsStreaming, replicatedEndpointsYaml } from './replication-node.js';

const postgres = logicalPostgresPerFile();

/** Three endpoints of one table: fields from its columns, a `select` that keeps two, and the operator's fields. */
const ENDPOINTS = [
  { name: 'items', fields: null },
  { name: 'picked', table: 'items', fields: null, select: '[id, v]' },
  { name: 'typed', table: 'items', fields: '{ id: integer, v: integer }' },
];

/** The first `upsert` event of a change feed, or the refusal (status and body) when the feed is not opened. */
async function firstFeedUpsert(url: string): Promise<{ status: number; data: string }> {
  const controller = new AbortController();
  const response = await fetch(url, { signal: controller.signal });
  if (response.status !== 200) return { status: response.status, data: await response.text() };
  const decoder = new TextDecoder();
  let text = '';
  try {
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      const event = /event: upsert\ndata: (.*)\n/.exec(text);
      if (event) return { status: 200, data: event[1]! };
    }
  } finally {
    controller.abort();
  }
  throw new Error(`the feed ended without an upsert:\n${text}`);
}

describe('a column added to a replicated table', () => {
  it('defect: a column added to the table (no default) was in the served records but could not be queried — 400 unknown field until the endpoint was rebuilt', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir('sluice-added-column-');
    const url = await databaseWith(
      postgres(),
      'added',
      'CREATE TABLE items (id int PRIMARY KEY, v int)',
      'INSERT INTO items SELECT g, g FROM generate_series(1, 50) g',
    );
    const apiPort = await freePort();
    const api = `http://127.0.0.1:${apiPort}`;
    const spec = {
      ...localNode('h1', dir.path),
      extraYaml: replicatedEndpointsYaml(url, ENDPOINTS, { apiPort }),
    };
    let node = await startNodeProcess(spec);
    try {
      const serving = () =>
        endpointsStreaming(
          node,
          ENDPOINTS.map((e) => e.name),
          { timeoutMs: 90_000 },
        );
      const before = await serving();
      await using _api = await startHostApiServer(node);
      // The api-server has each generation open (it answered from it) before the column exists.
      expect((await call(`${api}/v1/endpoints/items/records/3`)).body).toEqual({ id: 3, v: 3 });

      await sql(url, 'ALTER TABLE items ADD COLUMN note text');
      await sql(url, "UPDATE items SET note = 'x' WHERE id = 3");
      await waitFor(async () => (await call(`${api}/v1/endpoints/items/records/3`)).body.note === 'x', {
        timeoutMs: 30_000,
        what: 'the update that carries the new column to be served',
      });

      const byNote = { $filter: { note: 'x' } };
      const query = await call(`${api}/v1/endpoints/items/query`, { json: byNote });
      // Before: 400 INVALID_QUERY "Invalid query: $filter.note: unknown field "note"".
      expect(query.status, JSON.stringify(query.body)).toBe(200);
      expect(query.body.records).toEqual([{ id: 3, v: 3, note: 'x' }]);
      expect((await call(`${api}/v1/endpoints/items/count`, { json: byNote })).body).toEqual({ count: 1 });
      // Records written before the column read it as null, as PostgreSQL holds them: they sort first.
      const ordered = await call(`${api}/v1/endpoints/items/query`, {
        json: { $order_by: { note: 'desc' }, $limit: 2 },
      });
      expect(ordered.status, JSON.stringify(ordered.body)).toBe(200);
      expect(ordered.body.records).toEqual([
        { id: 3, v: 3, note: 'x' },
        { id: 50, v: 50 },
      ]);
      expect(
        (await call(`${api}/v1/endpoints/items/count`, { json: { $filter: { note: null } } })).body,
      ).toEqual({ count: 49 });
      // Typed from the column, as a fresh generation would type it.
      expect((await call(`${api}/v1/endpoints/items`)).body.schema.fields.note).toBe('string');
      // A change feed filtered on it.
      const feed = await firstFeedUpsert(
        `${api}/v1/endpoints/items/changes?filter=${encodeURIComponent(JSON.stringify(byNote.$filter))}`,
      );
      expect(feed.status, feed.data).toBe(200);
      expect(JSON.parse(feed.data).record).toEqual({ id: 3, v: 3, note: 'x' });

      // A column the select leaves out never becomes a field; the operator's fields stay the operator's.
      await waitFor(async () => (await call(`${api}/v1/endpoints/typed/records/3`)).body.note === 'x', {
        timeoutMs: 30_000,
        what: 'the endpoint with configured fields to carry the update',
      });
      expect((await call(`${api}/v1/endpoints/picked/records/3`)).body).toEqual({ id: 3, v: 3 });
      for (const name of ['picked', 'typed']) {
        const refused = await call(`${api}/v1/endpoints/${name}/query`, { json: byNote });
        expect(refused.status).toBe(400);
        expect(refused.body.detail).toMatch(/unknown field "note"/);
      }

      // Nothing was rebuilt: the same generations serve.
      const after = await serving();
      for (const [name, endpoint] of before)
        expect(after.get(name)?.servingCache).toBe(endpoint.servingCache);

      // A restart resumes in place (the stored schema grew; its identity did not), and the field stays.
      expect((await node.child.stop('SIGTERM', 30_000)).code).toBe(0);
      node = await startNodeProcess(spec);
      const restarted = await serving();
      for (const [name, endpoint] of before) {
        expect(restarted.get(name)?.servingCache).toBe(endpoint.servingCache);
        expect(restarted.get(name)?.decision?.decision, restarted.get(name)?.decision?.reason).toBe('resume');
      }
      await sql(url, "UPDATE items SET note = 'y' WHERE id = 4");
      await waitFor(
        async () => {
          const reply = await call(`${api}/v1/endpoints/items/query`, {
            json: { $filter: { note: { $in: ['x', 'y'] } }, $order_by: { id: 'asc' } },
          });
          return reply.status === 200 && reply.body.records.length === 2 ? reply.body.records : null;
        },
        { timeoutMs: 30_000, what: 'the resumed generation to serve the next update, queryable by note' },
      );
    } finally {
      await node.child.stop('SIGKILL');
    }
  });
});
