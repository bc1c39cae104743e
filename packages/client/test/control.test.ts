import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { createClient, type EndpointStreamEvent, SluiceClientError } from '../src/index.js';
import { item, startApp, waitUntil } from './servers.js';

const TOKEN = 'client-control-token-0123456789';
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe('@sluice/client: the control API of a real app-server (endpoints, generations, stream, nodes)', () => {
  it('lists endpoints and generations, rebuilds, rolls back, watches the stream, lists nodes and transfers', async () => {
    await using dir = await tempDir();
    const source = join(dir.path, 'items.jsonl');
    await writeFile(
      source,
      `${range(1, 3_000)
        .map((id) => JSON.stringify(item(id)))
        .join('\n')}\n`,
    );
    await using app = await startApp(dir.path, {
      extra: {
        control: { auth: { tokens: [TOKEN] } },
        cache: { gcGraceMs: 3_600_000 },
        endpoints: [
          {
            name: 'items',
            source: { type: 'file', path: source, format: 'jsonl' },
            primaryKey: ['id'],
            fields: { id: 'integer', value: 'number', category: 'string' },
          },
        ],
      },
    });
    const client = createClient({ controlUrl: app.url, token: TOKEN });
    const control = client.control;

    const blue = await waitUntil(async () => {
      const [items] = await control.endpoints();
      return items?.servingCache && items.records === 3_000 && !items.buildingCache
        ? items.servingCache
        : null;
    }, 'the first generation to serve');
    const listed = await control.generations('items');
    expect(listed.endpoint).toBe('items');
    expect(listed.generations.map((g) => [g.name, g.state, g.records])).toEqual([[blue, 'serving', 3_000]]);
    expect(listed.history.map((h) => [h.from, h.to, h.cause])).toEqual([[null, blue, 'restart']]);

    // Typed refusals with the server's code.
    const nothing = await control.promote('items').catch((e: unknown) => e);
    expect(nothing).toBeInstanceOf(SluiceClientError);
    expect(nothing).toMatchObject({ code: 'NOTHING_TO_PROMOTE', status: 409 });
    // Naming the generation meant: one not held is refused (nothing is held here), and nothing moves.
    expect(await control.promote('items', { generation: blue }).catch((e: unknown) => e)).toMatchObject({
      code: 'GENERATION_NOT_HELD',
      status: 409,
    });
    expect(await control.generations('nope').catch((e: unknown) => e)).toMatchObject({
      code: 'UNKNOWN_ENDPOINT',
      status: 404,
    });
    const unauthorized = createClient({ controlUrl: app.url, token: 'wrong-token-0123456789' }).control;
    expect(await unauthorized.endpoints().catch((e: unknown) => e)).toMatchObject({ code: 'UNAUTHORIZED' });
    // A refusal that retrying cannot fix ends the stream with the server's code.
    const refused = await (async () => {
      for await (const _ of unauthorized.watchEndpoints()) return null;
      return null;
    })().catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'UNAUTHORIZED', status: 401 });

    // The stream: the picture on connect, then a rebuild's switch and a rollback's, as they happen.
    const controller = new AbortController();
    const events: EndpointStreamEvent[] = [];
    let opened = 0;
    const watching = (async () => {
      for await (const event of control.watchEndpoints({
        signal: controller.signal,
        onOpen: () => {
          opened += 1;
        },
      }))
        events.push(event);
    })();
    await waitUntil(() => events.some((e) => e.type === 'endpoints'), 'the first picture');
    expect(opened).toBe(1);
    const first = events.find((e) => e.type === 'endpoints');
    expect(first?.type === 'endpoints' && first.endpoints[0]?.servingCache).toBe(blue);

    expect(await control.rebuild('items')).toEqual({ endpoint: 'items', rebuild: 'started' });
    const rebuilt = await waitUntil(
      () => events.find((e) => e.type === 'switch' && e.cause === 'rebuild'),
      'the switch of the rebuild',
    );
    const green = rebuilt.type === 'switch' ? rebuilt.to : '';
    expect(rebuilt).toMatchObject({ type: 'switch', endpoint: 'items', from: blue, cause: 'rebuild' });
    expect(await control.rollback('items')).toEqual({
      endpoint: 'items',
      from: green,
      to: blue,
      cause: 'rollback',
      changed: true,
    });
    await waitUntil(
      () =>
        events.some(
          (e) =>
            e.type === 'endpoints' &&
            e.endpoints[0]?.servingCache === blue &&
            e.endpoints[0].history[0]?.cause === 'rollback',
        ),
      'the picture after the rollback',
    );
    expect((await control.rollback('items', { to: blue })).changed).toBe(false);
    controller.abort();
    await watching;

    const nodes = await control.nodes();
    expect(nodes).toEqual([
      expect.objectContaining({
        nodeId: 'client-test',
        address: app.url,
        alive: true,
        lastSeenAt: expect.any(String),
      }),
    ]);

    // transfers.list: filtered by state, paged by cursor.
    for (const id of ['l1', 'l2', 'l3'])
      await client.transfers.submit({
        id,
        source: { type: 'file', path: source, format: 'jsonl' },
        destination: { type: 'file', path: join(dir.path, `${id}.jsonl`), format: 'jsonl' },
      });
    for (const id of ['l1', 'l2', 'l3']) await client.transfers.wait(id, { timeoutMs: 30_000 });
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await client.transfers.list({
        state: 'COMPLETED',
        limit: 2,
        ...(cursor ? { cursor } : {}),
      });
      pages += 1;
      expect(page.records.length).toBeLessThanOrEqual(2);
      seen.push(...page.records.map((r) => r.id));
      cursor = page.next ?? undefined;
    } while (cursor);
    expect(seen.sort()).toEqual(['l1', 'l2', 'l3']);
    expect(pages).toBe(2);
    expect((await client.transfers.list({ state: 'FAILED' })).records).toEqual([]);
    expect(await client.transfers.list({ owner: 'client-test', limit: 1 })).toMatchObject({
      records: [expect.objectContaining({ owner: expect.objectContaining({ nodeId: 'client-test' }) })],
      next: expect.any(String),
    });
  }, 90_000);
});
