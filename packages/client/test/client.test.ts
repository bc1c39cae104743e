import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort, signJwt, tempDir } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { type ChangeEvent, createClient, keySegment, SluiceClientError } from '../src/index.js';
import { item, startApi, startApp, startWriter, waitUntil } from './servers.js';

type Item = { id: number; value: number; category: string };

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** Applies change events to a local copy (what a subscriber keeps). */
function apply(into: Map<number, Item>, event: ChangeEvent<Item>): void {
  if (event.type === 'upsert') into.set(event.key[0] as number, event.record);
  else if (event.type === 'delete') into.delete(event.key[0] as number);
  else if (event.type === 'reset') into.clear();
}

describe('@sluice/client against real servers (Node)', () => {
  it("read your writes: a read with minPosition waits for the commit that reaches it, across the server's own wait", {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(join(dir.path, 'data'), [item(1)], { lsn: '0/100' });
    // The server waits 150 ms for a position, then answers 503 POSITION_NOT_REACHED: the client asks again.
    await using api = await startApi(dir.path, writer.root, { freshnessWaitMs: 150 });
    const items = createClient({ queryUrl: api.url }).endpoint<Item>('items');

    const first = await items.query({ $limit: 5 });
    expect(first.position).toEqual({ 'items.source': '0/100' });
    // Record 2 is written by the commit at 0/300, made ~1 s after the reads are sent (several server waits).
    const reads = Promise.all([
      items.get(2, { minPosition: '0/300' }),
      items.query({ $order_by: { id: 'asc' } }, { minPosition: { 'items.source': '0/300' } }),
      items.count({}, { minPosition: '0/300' }),
    ]);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await writer.commit([{ op: 'upsert', record: item(2) }], '0/300');
    const [row, page, count] = await reads;
    expect(row).toEqual(item(2));
    expect(page.records.map((r) => r.id)).toEqual([1, 2]);
    expect(page.position).toEqual({ 'items.source': '0/300' });
    expect(count).toBe(2);
    // Without minPosition nothing waits; a position never committed fails once the client's deadline passed.
    const never = await items
      .get(1, { minPosition: '0/900', freshnessTimeoutMs: 600 })
      .catch((e: unknown) => e);
    expect(never).toMatchObject({ code: 'POSITION_NOT_REACHED', status: 503 });
    const malformed = await items.get(1, { minPosition: 'not-an-lsn' }).catch((e: unknown) => e);
    expect(malformed).toMatchObject({ code: 'VALIDATION_FAILED', status: 400 });
  });

  it('defect: changes() took no minPosition — a feed opened right after a write left the write out of its snapshot (it came after live); now the feed opens from a generation that has it', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(join(dir.path, 'data'), [item(1)], { lsn: '0/100' });
    // The server waits 150 ms for a position, then answers 503 POSITION_NOT_REACHED: the client asks again.
    await using api = await startApi(dir.path, writer.root, { freshnessWaitMs: 150 });
    const items = createClient({ queryUrl: api.url }).endpoint<Item>('items');
    const events: ChangeEvent<Item>[] = [];
    const controller = new AbortController();
    const consumed = (async () => {
      for await (const event of items.changes({ minPosition: '0/300', signal: controller.signal }))
        events.push(event);
    })();
    // Ordering only: the feed is asked for (and refused by several server waits) before the write is committed.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await writer.commit([{ op: 'upsert', record: item(2) }], '0/300');
    await waitUntil(() => events.some((e) => e.type === 'live'), 'live');
    const live = events.findIndex((e) => e.type === 'live');
    const snapshot = events.slice(0, live).flatMap((e) => (e.type === 'upsert' ? [e.key[0]] : []));
    expect(snapshot).toEqual([1, 2]);
    controller.abort();
    await consumed;

    // A position never committed ends the feed once the client's deadline passed; a malformed one at once.
    const drain = async (options: Parameters<typeof items.changes>[0]) => {
      for await (const _ of items.changes(options)) {
        // only the error matters
      }
    };
    const never = await drain({ minPosition: '0/900', freshnessTimeoutMs: 600 }).catch((e: unknown) => e);
    expect(never).toMatchObject({ code: 'POSITION_NOT_REACHED', status: 503 });
    const malformed = await drain({ minPosition: 'not-an-lsn' }).catch((e: unknown) => e);
    expect(malformed).toMatchObject({ code: 'VALIDATION_FAILED', status: 400 });
  });

  it('endpoint: get, query, count, scan with $after paging, typed errors', async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(
      join(dir.path, 'data'),
      range(1, 120).map((id) => item(id)),
    );
    await using api = await startApi(dir.path, writer.root);
    const client = createClient({ queryUrl: api.url });
    const items = client.endpoint<Item>('items');

    expect(await items.get(7)).toEqual(item(7));
    expect(await items.get([8])).toEqual(item(8));
    expect(await items.get(9999)).toBeUndefined();
    const page = await items.query({ $filter: { category: 'a' }, $order_by: { value: 'desc' }, $limit: 5 });
    expect(page.records.map((r) => r.id)).toEqual([120, 117, 114, 111, 108]);
    expect(page.next).not.toBeNull();
    expect(page.cache).toBe(writer.cache.name);
    expect(await items.count({ category: 'a' })).toBe(40);
    expect(await items.count()).toBe(120);
    const scanned: number[] = [];
    for await (const row of items.scan({ $filter: { value: { $gte: 11 } }, $limit: 50 }))
      scanned.push(row.id);
    expect(scanned).toEqual(range(11, 120));

    const bad = await items.query({ $filter: { value: { $gt: 'x' } } }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(SluiceClientError);
    expect(bad).toMatchObject({ code: 'INVALID_QUERY', status: 400 });
    expect((bad as SluiceClientError).errors[0]?.path).toContain('$filter.value');
    const unknown = await client
      .endpoint('nope')
      .count()
      .catch((e: unknown) => e);
    expect(unknown).toMatchObject({ code: 'UNKNOWN_ENDPOINT', status: 404 });
    // A refusal that retrying cannot fix ends the feed with the server's code.
    const refused = await (async () => {
      for await (const _ of items.changes({ after: 'not-a-token' })) return null;
      return null;
    })().catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'VALIDATION_FAILED', status: 400 });
    const down = await createClient({ queryUrl: `http://127.0.0.1:${await freePort()}` })
      .endpoint('items')
      .count()
      .catch((e: unknown) => e);
    expect(down).toMatchObject({ code: 'NETWORK_ERROR', status: 0 });
  });

  it('defect: scan({ $limit: 0 }) ended at once with no records although every record matched — now INVALID_QUERY at $limit', async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(
      join(dir.path, 'data'),
      range(1, 3).map((id) => item(id)),
    );
    await using api = await startApi(dir.path, writer.root);
    const items = createClient({ queryUrl: api.url }).endpoint<Item>('items');
    const scanned: number[] = [];
    const walked = await (async () => {
      for await (const row of items.scan({ $limit: 0 })) scanned.push(row.id);
    })().catch((e: unknown) => e);
    expect(scanned).toEqual([]);
    expect(walked).toBeInstanceOf(SluiceClientError);
    expect(walked).toMatchObject({ code: 'INVALID_QUERY', status: 400 });
    expect((walked as SluiceClientError).errors.map((e) => e.path)).toEqual(['$limit']);
    const page = await items.query({ $limit: 0 }).catch((e: unknown) => e);
    expect(page).toMatchObject({ code: 'INVALID_QUERY', status: 400 });
    expect(await items.count()).toBe(3);
  });

  it('defect: a server that cannot be reached was "NETWORK_ERROR: POST /v1/endpoints/items/count: fetch failed", naming neither the server nor why', async () => {
    const url = `http://127.0.0.1:${await freePort()}`;
    const down = await createClient({ queryUrl: url })
      .endpoint('items')
      .count()
      .catch((e: unknown) => e);
    expect(down).toBeInstanceOf(SluiceClientError);
    expect(down).toMatchObject({ code: 'NETWORK_ERROR', status: 0 });
    expect((down as SluiceClientError).message).toBe(
      `POST ${url}/v1/endpoints/items/count: fetch failed (connect ECONNREFUSED ${url.slice('http://'.length)})`,
    );
  });

  it('defect: get() with a Date for a timestamp key was refused 400 (the key was sent as quoted JSON)', async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(join(dir.path, 'data'), [item(1)]);
    // A second endpoint keyed by (region, timestamp), written as the host's app-server would.
    const events = await writer.manager.create({
      endpoint: 'events',
      schema: {
        fields: { region: 'string', at: 'timestamp', n: 'integer' },
        primaryKey: ['region', 'at'],
        indexes: [],
      },
    });
    const at = new Date('2026-12-01T10:20:30.456Z');
    events.apply([{ op: 'upsert', record: { region: 'eu', at: at.toISOString(), n: 1 } }]);
    await events.commit(null);
    await writer.manager.redirect('events', events.name);
    await using api = await startApi(dir.path, writer.root);
    const client = createClient({ queryUrl: api.url });
    const endpoint = client.endpoint<{ region: string; at: string; n: number }>('events');
    const stored = { region: 'eu', at: '2026-12-01T10:20:30.456000Z', n: 1 };
    await waitUntil(async () => (await endpoint.count().catch(() => 0)) === 1, 'the events endpoint');
    expect(await endpoint.get(['eu', at.toISOString()])).toEqual(stored);
    // Before: 400 VALIDATION_FAILED, 'Invalid key: ""2026-12-01T10:20:30.456Z"" is not a timestamp'.
    expect(await endpoint.get(['eu', at])).toEqual(stored);
    expect(await endpoint.get(['eu', new Date(at.getTime() + 1)])).toBeUndefined();
    expect(keySegment(['eu', at])).toBe('eu,2026-12-01T10%3A20%3A30.456Z');
    await events.close();
  });

  it('defect: get("") on a single-field string key was refused 400 (the URL /records/ has no key segment)', async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(join(dir.path, 'data'), [item(1)]);
    // A second endpoint keyed by one string field, with a record whose key is the empty string.
    const codes = await writer.manager.create({
      endpoint: 'codes',
      schema: { fields: { code: 'string', n: 'integer' }, primaryKey: ['code'], indexes: [] },
    });
    codes.apply([
      { op: 'upsert', record: { code: '', n: 0 } },
      { op: 'upsert', record: { code: 'a,b', n: 1 } },
    ]);
    await codes.commit(null);
    await writer.manager.redirect('codes', codes.name);
    await using api = await startApi(dir.path, writer.root);
    const endpoint = createClient({ queryUrl: api.url }).endpoint<{ code: string; n: number }>('codes');
    await waitUntil(async () => (await endpoint.count().catch(() => 0)) === 2, 'the codes endpoint');
    expect(await endpoint.get('')).toEqual({ code: '', n: 0 });
    expect(await endpoint.get([''])).toEqual({ code: '', n: 0 });
    expect(await endpoint.get('a,b')).toEqual({ code: 'a,b', n: 1 });
    expect(await endpoint.get('nope')).toBeUndefined();
    await codes.close();
  });

  it('changes(): snapshot, live, a killed api-server process, reconnect and resume by token, a blue/green switch', async () => {
    await using dir = await tempDir();
    await using writer = await startWriter(
      join(dir.path, 'data'),
      range(1, 30).map((id) => item(id)),
    );
    await using api = await startApi(dir.path, writer.root);
    const items = createClient({ queryUrl: api.url }).endpoint<Item>('items');
    const local = new Map<number, Item>();
    const events: ChangeEvent<Item>[] = [];
    const controller = new AbortController();
    // The connection's state as the feed reports it: opened, lost (and why), opened again.
    const link: string[] = [];
    const consumed = (async () => {
      for await (const event of items.changes({
        signal: controller.signal,
        backoff: { initialMs: 50, maxMs: 500 },
        onOpen: () => link.push('open'),
        onConnectionLost: (why) => link.push(why),
      })) {
        events.push(event);
        apply(local, event);
      }
    })();
    const commits = () => events.filter((e) => e.type === 'commit').length;
    await waitUntil(() => events.some((e) => e.type === 'live'), 'live');
    expect(local.size).toBe(30);
    expect(link).toEqual(['open']);

    await writer.commit([
      { op: 'upsert', record: item(1, 5) },
      { op: 'delete', key: [2] },
    ]);
    await waitUntil(() => commits() === 1, 'first commit');
    await api.kill();
    // Committed while no api-server runs: the client must get these after it reconnects, by token.
    await writer.commit([{ op: 'upsert', record: item(40, 1) }]);
    await writer.commit([
      { op: 'delete', key: [3] },
      { op: 'upsert', record: item(4, 9) },
    ]);
    // The open connection is lost with the process, then attempts find nothing listening until it is back.
    await waitUntil(() => link.includes('unreachable'), 'the feed to report the server unreachable');
    expect(link.slice(0, 3)).toEqual(['open', 'closed', 'unreachable']);
    await api.restart();
    await waitUntil(() => commits() === 3, 'the commits made while the server was down', 60_000);
    expect(link.at(-1)).toBe('open');
    expect(link.filter((l) => l === 'open')).toHaveLength(2);
    const tokens = events.flatMap((e) => ('token' in e && e.token ? [e.token] : []));
    expect(new Set(tokens).size).toBe(tokens.length);
    expect(events.filter((e) => e.type === 'reset' || e.type === 'live')).toHaveLength(1);
    const query = async () => {
      const rows = new Map<number, Item>();
      for await (const row of items.scan({ $limit: 1000 })) rows.set(row.id, row);
      return rows;
    };
    expect(local).toEqual(await query());

    const green = await writer.rebuild([...range(1, 20).map((id) => item(id, 2)), item(99)]);
    await waitUntil(() => events.some((e) => e.type === 'switch'), 'switch');
    await waitUntil(() => commits() === 4, 'the commit closing the merge');
    expect(events.find((e) => e.type === 'switch')).toMatchObject({ to: green });
    expect(local).toEqual(await query());
    controller.abort();
    await consumed;
  }, 90_000);

  it('defect: changes({ after, snapshot: true }) cut off mid-snapshot resumed after the old token — the local copy lacked every record the snapshot had not reached', async () => {
    await using dir = await tempDir();
    // Enough records that the snapshot cannot fit in the socket buffers: the server waits for the client to read.
    await using writer = await startWriter(
      join(dir.path, 'data'),
      range(1, 20_000).map((id) => item(id)),
    );
    await using api = await startApi(dir.path, writer.root, { changes: { bufferBytes: 16 * 1024 } });
    const items = createClient({ queryUrl: api.url }).endpoint<Item>('items');

    // A token from an earlier run: the live point of the first snapshot.
    let token: string | undefined;
    for await (const event of items.changes()) {
      if (event.type === 'live') {
        token = event.token;
        break;
      }
    }
    await writer.commit([{ op: 'upsert', record: item(1, 7) }]);

    // A consumer that lost its copy asks for a full one, keeping its token: snapshot, live, then changes.
    const local = new Map<number, Item>();
    const events: ChangeEvent<Item>[] = [];
    const controller = new AbortController();
    const feed = items.changes({
      after: token!,
      snapshot: true,
      signal: controller.signal,
      backoff: { initialMs: 50, maxMs: 500 },
    });
    const first = await feed.next();
    expect(first.value).toMatchObject({ type: 'upsert' });
    events.push(first.value as ChangeEvent<Item>);
    apply(local, first.value as ChangeEvent<Item>);
    // The api-server dies before the snapshot is complete; a commit lands while it is down.
    await api.kill();
    await writer.commit([{ op: 'delete', key: [2] }]);
    await api.restart();
    const consumed = (async () => {
      for await (const event of feed) {
        events.push(event);
        apply(local, event);
      }
    })();
    await writer.commit([{ op: 'upsert', record: item(3, 9) }]);
    await waitUntil(
      // at a consistent point: its commit, or the live point of a snapshot that already held it
      () => local.get(3)?.value === 27 && ['commit', 'live'].includes(events.at(-1)?.type ?? ''),
      'the commit made after the restart',
      60_000,
    );
    const rows = new Map<number, Item>();
    for await (const row of items.scan({ $limit: 1000 })) rows.set(row.id, row);
    expect(local.size).toBe(rows.size);
    expect(local).toEqual(rows);
    // The snapshot was restarted, and said so first.
    expect(events.filter((e) => e.type === 'reset')).toEqual([
      { type: 'reset', reason: 'reconnected-during-snapshot' },
    ]);
    controller.abort();
    await consumed;
  }, 120_000);

  it("changes() with a token function: a feed ended at its token's expiry goes on with the renewed token, no gap; a fixed token ends it UNAUTHORIZED", async () => {
    const secret = 'client-token-source-secret-0123456789';
    const sign = (claims: Record<string, unknown>) => signJwt(secret, { endpoints: ['items'], ...claims });
    await using dir = await tempDir();
    await using writer = await startWriter(
      join(dir.path, 'data'),
      range(1, 10).map((id) => item(id)),
    );
    await using api = await startApi(dir.path, writer.root, { auth: { jwtSecret: secret } });
    // Each token expires 3 s after it is asked for (JWT times are whole seconds): the server ends the feed then.
    const issued: number[] = [];
    const renewing = () => {
      const exp = Math.floor(Date.now() / 1000) + 3;
      issued.push(exp);
      return sign({ exp });
    };
    const fixed = renewing();
    const follow = (token: string | (() => string)) => {
      const events: ChangeEvent<Item>[] = [];
      const local = new Map<number, Item>();
      const controller = new AbortController();
      const items = createClient({ queryUrl: api.url, token }).endpoint<Item>('items');
      const done = (async () => {
        for await (const event of items.changes({
          signal: controller.signal,
          backoff: { initialMs: 50, maxMs: 200 },
        })) {
          events.push(event);
          apply(local, event);
        }
      })();
      return { events, local, controller, done };
    };
    const renewed = follow(renewing);
    const once = follow(fixed);
    // Settled whenever it ends (a rejection caught here, not left unhandled until the end of the test).
    const onceEnded = once.done.then(
      () => null,
      (err: unknown) => err,
    );
    await waitUntil(() => renewed.events.some((e) => e.type === 'live'), 'renewed: live');
    await waitUntil(() => once.events.some((e) => e.type === 'live'), 'fixed: live');
    // Writes spread over two expiries of the renewing tokens.
    for (let n = 0; n < 8; n += 1) {
      await writer.commit([{ op: 'upsert', record: item(100 + n, n) }]);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
    await waitUntil(() => renewed.local.size === 18, 'renewed: every record written', 30_000);
    // Ended at expiry and resumed with the next token each time: more than one token asked for, nothing lost or
    // repeated, never a new snapshot.
    expect(issued.length).toBeGreaterThan(2);
    expect(renewed.events.filter((e) => e.type === 'live' || e.type === 'reset')).toHaveLength(1);
    expect([...renewed.local.keys()].sort((a, b) => a - b)).toEqual([...range(1, 10), ...range(100, 107)]);
    // The same feed with a fixed token: ended at its expiry, the reconnect refused, the stream over.
    expect(await onceEnded).toMatchObject({ code: 'UNAUTHORIZED' });
    expect(once.local.size).toBeLessThan(18);
    renewed.controller.abort();
    await renewed.done;
  }, 90_000);

  it('defect: changes() with a token function whose renewed token had another row filter kept the old view across a killed api-server — now a reset, and the copy equals the new view', async () => {
    const secret = 'client-feed-view-secret-0123456789';
    await using dir = await tempDir();
    await using writer = await startWriter(
      join(dir.path, 'data'),
      range(1, 30).map((id) => item(id)),
    );
    await using api = await startApi(dir.path, writer.root, { auth: { jwtSecret: secret } });
    // The caller's grant narrows while the server is down: category a, then category b.
    let category = 'a';
    const token = () => signJwt(secret, { endpoints: ['items'], filters: { items: { category } } });
    const items = createClient({ queryUrl: api.url, token }).endpoint<Item>('items');
    const local = new Map<number, Item>();
    const events: ChangeEvent<Item>[] = [];
    const controller = new AbortController();
    const consumed = (async () => {
      for await (const event of items.changes({
        signal: controller.signal,
        backoff: { initialMs: 50, maxMs: 200 },
      })) {
        events.push(event);
        apply(local, event);
      }
    })();
    await waitUntil(() => events.some((e) => e.type === 'live'), 'live');
    expect([...local.values()].every((row) => row.category === 'a')).toBe(true);
    await api.kill();
    category = 'b';
    await api.restart();
    // In view b: once it arrives the resumed feed is live under the new token.
    await writer.commit([{ op: 'upsert', record: item(4, 7) }]);
    await waitUntil(() => local.get(4)?.value === 28, 'the change to record 4', 60_000);
    const view = new Map<number, Item>();
    for await (const row of items.scan({ $limit: 1000 })) view.set(row.id, row);
    expect(view.size).toBe(10);
    expect(local).toEqual(view);
    expect(events.filter((e) => e.type === 'reset')).toEqual([{ type: 'reset', reason: 'filter-changed' }]);
    controller.abort();
    await consumed;
  }, 120_000);

  it('transfers: submit, wait, get, idempotent resubmit, conflict, terminate; 429 and network errors retried', async () => {
    await using dir = await tempDir();
    const input = join(dir.path, 'in.jsonl');
    await writeFile(
      input,
      `${range(1, 40)
        .map((id) => JSON.stringify(item(id)))
        .join('\n')}\n`,
    );
    const port = await freePort();
    const client = createClient({ controlUrl: `http://127.0.0.1:${port}` });
    const request = (id: string, extra: Record<string, unknown> = {}) => ({
      id,
      source: { type: 'file' as const, path: input, format: 'jsonl' as const },
      destination: { type: 'file' as const, path: join(dir.path, `${id}.jsonl`), format: 'jsonl' as const },
      ...extra,
    });
    // Nothing listens yet: the submit retries network errors until the app-server is up.
    const networkRetries: string[] = [];
    const early = client.transfers.submit(request('t-early'), {
      retries: 200,
      initialDelayMs: 100,
      maxDelayMs: 500,
      onRetry: (error) => networkRetries.push(error.code),
    });
    await new Promise((r) => setTimeout(r, 300));
    await using _app = await startApp(dir.path, {
      port,
      transfers: { maxConcurrentTransfers: 1, queueSize: 0 },
    });
    expect((await early).status).toBe(201);
    expect(networkRetries.length).toBeGreaterThan(0);
    expect(new Set(networkRetries)).toEqual(new Set(['NETWORK_ERROR']));
    expect((await client.transfers.wait('t-early', { timeoutMs: 30_000 })).state).toBe('COMPLETED');

    const first = await client.transfers.submit(request('t1'));
    expect(first.status).toBe(201);
    const done = await client.transfers.wait('t1', { timeoutMs: 30_000 });
    expect(done).toMatchObject({
      id: 't1',
      state: 'COMPLETED',
      result: { recordsRead: 40, recordsWritten: 40 },
    });
    expect(typeof done.createdAt).toBe('string');
    expect((await client.transfers.get('t1')).state).toBe('COMPLETED');
    expect((await client.transfers.submit(request('t1'))).status).toBe(200);
    const conflict = await client.transfers
      .submit(request('t1', { properties: { other: 'body' } }))
      .catch((e: unknown) => e);
    expect(conflict).toMatchObject({ code: 'IDEMPOTENCY_CONFLICT', status: 422 });
    const missing = await client.transfers.get('nope').catch((e: unknown) => e);
    expect(missing).toMatchObject({ code: 'TRANSFER_NOT_FOUND', status: 404 });

    // One slot, no queue: a second transfer is 429 QUEUE_FULL while the slow one runs; submit retries it.
    const slow = await client.transfers.submit(request('t-slow', { options: { maxRecordsPerSecond: 10 } }));
    expect(slow.status).toBe(201);
    const refusals: SluiceClientError[] = [];
    const queued = client.transfers.submit(request('t-queued'), {
      retries: 50,
      maxDelayMs: 500,
      onRetry: (error) => refusals.push(error),
    });
    await waitUntil(() => refusals.length > 0, 'a refusal while the slot is taken');
    expect(refusals[0]).toMatchObject({ code: 'QUEUE_FULL', status: 429 });
    expect(refusals[0]?.retryAfterMs).toBeGreaterThan(0);
    const terminated = await client.transfers.terminate('t-slow');
    expect(['TERMINATED', 'IN_PROGRESS']).toContain(terminated.state);
    expect((await client.transfers.wait('t-slow', { timeoutMs: 30_000 })).state).toBe('TERMINATED');
    expect((await queued).status).toBe(201);
    expect((await client.transfers.wait('t-queued', { timeoutMs: 30_000 })).state).toBe('COMPLETED');
  });
});
