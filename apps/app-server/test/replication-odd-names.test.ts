/**
 * A replicated table whose column names JavaScript, JSON or the query language treat specially, and values a
 * double cannot hold, through a real app-server and api-server against a private PostgreSQL with `wal_level=logical`:
 * lookups by key, queries on every index, refusals of names the query language cannot address, change-feed events,
 * and a snapshot row and a streamed row of the same values served byte for byte alike.
 */
import { freePort, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, startHostApiServer, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { databaseWith, endpointsStreaming, replicatedEndpointsYaml } from './replication-node.js';

const postgres = logicalPostgresPerFile();

/** The first `data:` of an event `event` of a change feed (read until it comes, then the feed is closed). */
async function firstFeedEvent(url: string, event: string): Promise<string> {
  const controller = new AbortController();
  const response = await fetch(url, { signal: controller.signal });
  expect(response.status).toBe(200);
  const decoder = new TextDecoder();
  let text = '';
  try {
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      const found = new RegExp(`event: ${event}\\ndata: (.*)\\n`).exec(text);
      if (found) return found[1]!;
    }
  } finally {
    controller.abort();
  }
  throw new Error(`the feed ended without an ${event} event:\n${text}`);
}

const ODD_COLUMNS = `"a.b" text PRIMARY KEY, "constructor" int, "__proto__" text, "toString" text, "hasOwnProperty" text,
  "$x" text, "with space" text, """quoted""" text, "CamelCase" text, "naïve" text`;
const oddRow = (n: number) =>
  `('k${n}', ${n}, 'p${n}', 't${n}', 'h${n}', 'x${n}', 'w${n}', 'q${n}', 'c${n}', 'n${n}')`;
/**
 * A row of `odd` as served: the schema's fields in column order, then the columns the query language cannot name
 * (carried in the record, no fields of the schema), as the cache orders a record's text.
 */
const oddRecord = (n: number) =>
  `{"a.b":"k${n}","toString":"t${n}","hasOwnProperty":"h${n}","with space":"w${n}","\\"quoted\\"":"q${n}","CamelCase":"c${n}","naïve":"n${n}","constructor":${n},"__proto__":"p${n}","$x":"x${n}"}`;

describe('a replicated table with odd column names and exact values, over HTTP', () => {
  it('serves odd column names and values as PostgreSQL holds them, and refuses names the query language cannot address', {
    timeout: 240_000,
  }, async () => {
    await using dir = await tempDir('sluice-odd-names-');
    const url = await databaseWith(
      postgres(),
      'odd_names',
      `CREATE TABLE odd (${ODD_COLUMNS})`,
      `INSERT INTO odd VALUES ${oddRow(1)}, ${oddRow(2)}`,
      'CREATE TABLE vals (id int8 PRIMARY KEY, big int8, n numeric, f float8, r real)',
      `INSERT INTO vals VALUES (1, 9007199254740991, 12.5, 0.1, 0.1)`,
    );
    const apiPort = await freePort();
    const api = `http://127.0.0.1:${apiPort}`;
    const indexes = `[[toString], [hasOwnProperty], ["with space"], ['"quoted"'], [CamelCase], [naïve]]`;
    const spec = {
      ...localNode('h1', dir.path),
      extraYaml: replicatedEndpointsYaml(
        url,
        [
          { name: 'odd', fields: null, primaryKey: '"a.b"', indexes },
          { name: 'vals', fields: null, indexes: '[[n], [f]]' },
        ],
        { apiPort },
      ),
    };
    await using node = await startNodeProcess(spec);
    await endpointsStreaming(node, ['odd', 'vals'], { timeoutMs: 90_000 });
    await using _api = await startHostApiServer(node);

    // A lookup by key returns the stored bytes: every column, `__proto__` an own field.
    const lookup = await fetch(`${api}/v1/endpoints/odd/records/k1`);
    expect(lookup.status).toBe(200);
    expect(await lookup.text()).toBe(oddRecord(1));

    // Streamed rows read like snapshot rows.
    await sql(url, `INSERT INTO odd VALUES ${oddRow(3)}`);
    await waitFor(async () => (await call(`${api}/v1/endpoints/odd/records/k3`)).status === 200, {
      timeoutMs: 30_000,
      what: 'the streamed insert to be served',
    });
    expect(await (await fetch(`${api}/v1/endpoints/odd/records/k3`)).text()).toBe(oddRecord(3));

    // Each index answers a filter and an order on its field.
    for (const field of ['toString', 'hasOwnProperty', 'with space', '"quoted"', 'CamelCase', 'naïve']) {
      const value = JSON.parse(oddRecord(3))[field];
      const filtered = await call(`${api}/v1/endpoints/odd/query`, { json: { $filter: { [field]: value } } });
      expect(filtered.status, JSON.stringify(filtered.body)).toBe(200);
      expect(filtered.body.records.map((r: Record<string, unknown>) => r['a.b'])).toEqual(['k3']);
      const ordered = await call(`${api}/v1/endpoints/odd/query`, {
        json: { $order_by: { [field]: 'desc' } },
      });
      expect(ordered.body.records.map((r: Record<string, unknown>) => r['a.b'])).toEqual(['k3', 'k2', 'k1']);
    }
    // Names the query language cannot address are refused by name, with a stable code.
    for (const [body, detail] of [
      ['{"$filter":{"$x":"x1"}}', /\$filter\.\$x: unknown operator/],
      ['{"$filter":{"constructor":1}}', /\$filter\.constructor: reserved field name/],
      ['{"$filter":{"__proto__":"p1"}}', /\$filter\.__proto__: reserved field name/],
      ['{"$order_by":{"constructor":"asc"}}', /\$order_by\.constructor: (invalid key: )?reserved field name/],
    ] as const) {
      const refused = await call(`${api}/v1/endpoints/odd/query`, {
        raw: body,
        contentType: 'application/json',
      });
      expect(refused.status, body).toBe(400);
      expect(refused.body.code).toBe('INVALID_QUERY');
      expect(refused.body.detail).toMatch(detail);
    }
    // A change-feed event carries the record as the table holds it.
    const upsert = await firstFeedEvent(`${api}/v1/endpoints/odd/changes?snapshot=true`, 'upsert');
    expect(upsert).toBe(`{"key":["k1"],"record":${oddRecord(1)}}`);

    // Values: a snapshot row and a streamed row of the same values are served alike, as PostgreSQL prints them.
    await sql(url, 'INSERT INTO vals VALUES (2, 9007199254740991, 12.5, 0.1, 0.1)');
    await waitFor(async () => (await call(`${api}/v1/endpoints/vals/records/2`)).status === 200, {
      timeoutMs: 30_000,
      what: 'the streamed row of vals to be served',
    });
    const snapshotRow = await (await fetch(`${api}/v1/endpoints/vals/records/1`)).text();
    const streamedRow = await (await fetch(`${api}/v1/endpoints/vals/records/2`)).text();
    expect(snapshotRow).toBe('{"id":1,"big":9007199254740991,"n":12.5,"f":0.1,"r":0.1}');
    expect(streamedRow).toBe(snapshotRow.replace('"id":1', '"id":2'));
    // A key past 2^53 is refused by name, never rounded to another record's key.
    const beyond = await call(`${api}/v1/endpoints/vals/records/9007199254740993`);
    expect(beyond.status).toBe(400);
    expect(beyond.body.detail).toMatch(/out of range/);
  });
});
