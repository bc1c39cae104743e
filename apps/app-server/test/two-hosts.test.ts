/**
 * Two hosts as DESIGN.md describes a cluster: host A and host B each run an app-server and two api-servers over
 * their own dataDir, and share one PostgreSQL store and one nats-server. Both materialize the same sources — a
 * PostgreSQL table by logical replication (each host its own slot) and a JetStream stream — and steer their own
 * generations; transfers are cluster-wide.
 */
import { join } from 'node:path';
import { openStore, type SqlDataPlaneStore } from '@sluice/store';
import {
  type ChildHandle,
  freePort,
  type NatsServerHandle,
  type SourceWriter,
  sql,
  startItemsWriter,
  startNatsServer,
  type TempDir,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WireNats } from '../chaos/nats-wire.js';
import {
  call,
  createCountedDestination,
  fileTransfer,
  type NodeProcess,
  type NodeSpec,
  startHostApiServer,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { endpointOf, itemsTable } from './replication-node.js';

const postgres = logicalPostgresPerFile();

/** One simulated host: its app-server and its two api-servers (same config file, same dataDir). */
interface Host {
  name: string;
  spec: NodeSpec;
  node: NodeProcess;
  apiPorts: [number, number];
  apis: ChildHandle[];
}

let nats: NatsServerHandle;
let wire: WireNats;
let dir: TempDir;
let store: SqlDataPlaneStore;
let sourceUrl: string;
let destinationUrl: string;
const hosts = new Map<string, Host>();
let eventsPublished = 0;

const files = (name: string) => join(dir.path, 'files', name);
const apiUrls = (host: Host) => host.apiPorts.map((port) => `http://127.0.0.1:${port}`);
const host = (name: string): Host => {
  const found = hosts.get(name);
  if (!found) throw new Error(`host ${name} is not running`);
  return found;
};

function hostYaml(): string {
  return [
    'connections:',
    `  db: { type: postgres, url: "${sourceUrl}" }`,
    `  dst: { type: postgres, url: "${destinationUrl}" }`,
    'api: { freshnessWaitMs: 5000 }',
    // Replaced generations kept an hour, so a rollback always finds its target.
    'cache: { gcGraceMs: 3600000 }',
    'endpoints:',
    '  - name: items',
    '    source: { type: postgres, connection: db, table: items }',
    '    primaryKey: [id]',
    '    fields: { id: integer, v: integer, s: string }',
    '  - name: events',
    '    source: { type: jetstream, stream: EVENTS, subject: "events.>" }',
    '    primaryKey: [id]',
    '    fields: { id: integer, value: number, category: string }',
    // The same stream again, switched by an operator only: a rebuild is held until promoted.
    '  - name: steered',
    '    source: { type: jetstream, stream: EVENTS, subject: "events.>" }',
    '    primaryKey: [id]',
    '    fields: { id: integer, value: number, category: string }',
    '    switch: { mode: manual }',
  ].join('\n');
}

async function publishEvents(count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    eventsPublished += 1;
    const id = (eventsPublished % 150) + 1;
    await wire.request('events.items', { id, value: eventsPublished, category: `c${eventsPublished % 7}` });
  }
}

async function startApis(host: Host): Promise<ChildHandle[]> {
  return Promise.all(
    host.apiPorts.map((port) => startHostApiServer(host.node, { SLUICE_API_PORT: String(port) })),
  );
}

/** Both endpoints of `node` serve, and nothing builds. */
async function endpointsSettled(node: Pick<NodeProcess, 'url'>) {
  return waitFor(
    async () => {
      const items = await endpointOf(node, 'items');
      const events = await endpointOf(node, 'events');
      const steered = await endpointOf(node, 'steered');
      return items?.servingCache &&
        items.buildingCache === null &&
        items.replication?.committedLsn &&
        events?.servingCache &&
        events.buildingCache === null &&
        steered?.servingCache &&
        steered.buildingCache === null
        ? { items: items.servingCache, events: events.servingCache, steered: steered.servingCache }
        : null;
    },
    { timeoutMs: 60_000, intervalMs: 200, what: 'both endpoints to serve' },
  );
}

async function startHost(name: string, spec?: NodeSpec): Promise<Host> {
  const nodeSpec: NodeSpec = spec ?? {
    nodeId: name,
    dir: join(dir.path, name),
    store: storeUrl,
    nats: nats.url,
    roots: [join(dir.path, 'files')],
    extraYaml: hostYaml(),
  };
  const node = await startNodeProcess(nodeSpec);
  await endpointsSettled(node);
  const previous = hosts.get(name);
  const created: Host = {
    name,
    spec: node.spec,
    node,
    apiPorts: previous?.apiPorts ?? [await freePort(), await freePort()],
    apis: previous?.apis ?? [],
  };
  if (created.apis.length === 0) {
    created.apis = await startApis(created);
    for (const url of apiUrls(created))
      await waitFor(async () => (await call(`${url}/v1/endpoints/events/records/1`)).status === 200, {
        timeoutMs: 60_000,
        what: `${name}'s api-server to serve`,
      });
  }
  hosts.set(name, created);
  return created;
}

let storeUrl: string;

/** Every record of `endpoint` through the api-server at `url`, by id, paged; `headers` go with each page. */
async function allRecords(url: string, endpoint: string, headers: Record<string, string> = {}) {
  const records: unknown[] = [];
  const caches = new Set<string>();
  let after: string | null = null;
  do {
    const reply = await call(`${url}/v1/endpoints/${endpoint}/query`, {
      json: { $order_by: { id: 'asc' }, $limit: 200, ...(after ? { $after: after } : {}) },
      headers,
    });
    if (reply.status !== 200)
      throw new Error(`${url} answered ${reply.status}: ${JSON.stringify(reply.body)}`);
    caches.add(reply.headers.get('sluice-cache') ?? '');
    records.push(...reply.body.records);
    after = reply.body.next;
  } while (after !== null);
  return { records, caches: [...caches] };
}

/** The generation the api-server at `url` answers `endpoint` from (a query: the writer deletes rows by id). */
async function answeringCache(url: string, endpoint = 'events'): Promise<string | null> {
  const reply = await call(`${url}/v1/endpoints/${endpoint}/query`, { json: { $limit: 1 } });
  return reply.status === 200 ? reply.headers.get('sluice-cache') : null;
}

/** `sluice_api_switches_total` of `endpoint` (every reason) on the api-server at `url`. */
async function switchesOf(url: string, endpoint: string): Promise<number> {
  const metrics = await (await fetch(`${url}/metrics`)).text();
  let total = 0;
  const pattern = new RegExp(
    `^sluice_api_switches_total\\{endpoint="${endpoint}",reason="[a-z]+"\\} (\\d+)$`,
    'gm',
  );
  for (const match of metrics.matchAll(pattern)) total += Number(match[1]);
  return total;
}

/** Reads `events` and `steered` on every url in a loop until stopped; keeps the answers that were not 200. */
function readLoad(urls: string[]) {
  let running = true;
  const failures: string[] = [];
  let reads = 0;
  const loops = urls
    .flatMap((base) => ['events', 'steered'].map((endpoint) => `${base}/v1/endpoints/${endpoint}/records/1`))
    .map(async (url) => {
      while (running) {
        const response = await fetch(url).catch((err: Error) => err);
        reads += 1;
        if (response instanceof Error) failures.push(`${url}: ${response.message}`);
        else {
          await response.arrayBuffer();
          if (response.status !== 200) failures.push(`${url}: ${response.status}`);
        }
      }
    });
  return {
    failures,
    get reads() {
      return reads;
    },
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

beforeAll(async () => {
  nats = await startNatsServer();
  wire = await WireNats.connect(nats.port);
  await wire.api('$JS.API.STREAM.CREATE.EVENTS', { name: 'EVENTS', subjects: ['events.>'] });
  dir = await tempDir('sluice-two-hosts-');
  sourceUrl = await itemsTable(postgres(), 'source', { rows: 300 });
  storeUrl = await postgres().createDatabase('store');
  destinationUrl = await postgres().createDatabase('dst');
  store = await openStore(storeUrl);
  await publishEvents(150);
  await startHost('host-a');
  await startHost('host-b');
}, 180_000);

afterAll(async () => {
  for (const h of hosts.values()) {
    await Promise.allSettled(h.apis.map((api) => api.stop('SIGKILL')));
    await h.node.child.stop('SIGKILL');
  }
  await store?.[Symbol.asyncDispose]();
  await wire?.[Symbol.asyncDispose]();
  await nats?.[Symbol.asyncDispose]();
  await dir?.[Symbol.asyncDispose]();
});

describe('a two-host cluster (shared PostgreSQL store and NATS, caches per host)', {
  timeout: 120_000,
}, () => {
  it('each host has its own replication slot, named after its node id', async () => {
    const slots = await sql<{ slot_name: string }>(
      sourceUrl,
      'SELECT slot_name FROM pg_replication_slots ORDER BY slot_name',
    );
    const names = slots.map((s) => s.slot_name);
    expect(names.filter((n) => n.includes('host_a'))).toHaveLength(1);
    expect(names.filter((n) => n.includes('host_b'))).toHaveLength(1);
  });

  it('both hosts converge to the same records of a replicated table and a JetStream stream under a write load', async () => {
    {
      await using writer: SourceWriter = startItemsWriter(sourceUrl, 300);
      await publishEvents(300);
      await waitFor(() => writer.written >= 100, { timeoutMs: 30_000, what: '100 source transactions' });
    }
    const lsn = (await sql<{ lsn: string }>(sourceUrl, 'SELECT pg_current_wal_lsn()::text AS lsn'))[0]!.lsn;
    const rows = await sql<{ id: number; v: number; s: string }>(
      sourceUrl,
      'SELECT id, v, s FROM items ORDER BY id',
    );
    const all = [...hosts.values()].flatMap(apiUrls);
    for (const url of all) {
      const items = await allRecords(url, 'items', { 'sluice-min-position': lsn });
      expect(items.records, url).toEqual(rows);
    }
    // The stream's last message reached every host: each serves the same 150 records.
    const expected = await waitFor(
      async () => {
        const first = await allRecords(all[0]!, 'events');
        return first.records.some((r) => (r as { value: number }).value === eventsPublished) ? first : null;
      },
      { timeoutMs: 30_000, what: 'the last event on the first api-server' },
    );
    expect(expected.records).toHaveLength(150);
    for (const url of all)
      await waitFor(
        async () =>
          JSON.stringify((await allRecords(url, 'events')).records) === JSON.stringify(expected.records),
        { timeoutMs: 30_000, what: `${url} to serve the same events` },
      );
  });

  it("a rebuild, a promote and a rollback on host A move both of A's api-servers with no failed read; host B keeps its own generations, also across a restart of B's app-server", async () => {
    const a = host('host-a');
    const b = host('host-b');
    const aBlue = (await endpointsSettled(a.node)).events;
    const aSteeredBlue = (await endpointsSettled(a.node)).steered;
    const bServing = (await endpointsSettled(b.node)).events;
    const bSteered = (await endpointsSettled(b.node)).steered;
    const switchesOn = (urls: string[]) =>
      Promise.all(urls.flatMap((u) => ['events', 'steered'].map((e) => switchesOf(u, e))));
    const aSwitches = await switchesOn(apiUrls(a));
    const bSwitches = await switchesOn(apiUrls(b));
    const load = readLoad([...apiUrls(a), ...apiUrls(b)]);
    try {
      const rebuild = await call(`${a.node.url}/v1/endpoints/events/rebuild`, { method: 'POST' });
      expect(rebuild.status).toBe(202);
      const aGreen = await waitFor(
        async () => {
          const events = await endpointOf(a.node, 'events');
          return events?.buildingCache === null && events.servingCache !== aBlue ? events.servingCache : null;
        },
        { timeoutMs: 60_000, what: "host A's rebuild to switch" },
      );
      for (const url of apiUrls(a))
        await waitFor(async () => (await answeringCache(url)) === aGreen, {
          timeoutMs: 15_000,
          what: `${url} to serve A's new generation`,
        });
      for (const url of apiUrls(b)) expect(await answeringCache(url)).toBe(bServing);

      // Host B's app-server restarts meanwhile: it resumes its own generation, never A's.
      await b.node.child.stop('SIGTERM');
      const bAgain = await startHost('host-b', b.spec);
      expect((await endpointsSettled(bAgain.node)).events).toBe(bServing);

      // A manual endpoint: the rebuilt generation is held (nothing moves) until promoted.
      expect((await call(`${a.node.url}/v1/endpoints/steered/rebuild`, { method: 'POST' })).status).toBe(202);
      const held = await waitFor(async () => (await endpointOf(a.node, 'steered'))?.held?.cache ?? null, {
        timeoutMs: 60_000,
        what: "host A's steered green to be held",
      });
      for (const url of apiUrls(a)) expect(await answeringCache(url, 'steered')).toBe(aSteeredBlue);
      const promote = await call(`${a.node.url}/v1/endpoints/steered/promote`, { method: 'POST' });
      expect(promote.status, JSON.stringify(promote.body)).toBe(200);
      expect(promote.body).toMatchObject({ from: aSteeredBlue, to: held, changed: true });
      for (const url of apiUrls(a))
        await waitFor(async () => (await answeringCache(url, 'steered')) === held, {
          timeoutMs: 15_000,
          what: `${url} to serve A's promoted generation`,
        });

      const rollback = await call(`${a.node.url}/v1/endpoints/events/rollback`, { method: 'POST' });
      expect(rollback.status, JSON.stringify(rollback.body)).toBe(200);
      expect(rollback.body).toMatchObject({ from: aGreen, to: aBlue, changed: true });
      for (const url of apiUrls(a))
        await waitFor(async () => (await answeringCache(url)) === aBlue, {
          timeoutMs: 15_000,
          what: `${url} to serve A's rolled-back generation`,
        });
    } finally {
      await load.stop();
    }
    expect(load.failures).toEqual([]);
    expect(load.reads).toBeGreaterThan(0);
    for (const url of apiUrls(b)) {
      expect(await answeringCache(url)).toBe(bServing);
      expect(await answeringCache(url, 'steered')).toBe(bSteered);
    }
    // Each of A's api-servers: events switched twice (rebuild, rollback), steered once (promote); B's not at all.
    expect(await switchesOn(apiUrls(a))).toEqual(aSwitches.map((n, i) => n + (i % 2 === 0 ? 2 : 1)));
    expect(await switchesOn(apiUrls(b))).toEqual(bSwitches);
    // B's aliases never moved for A's steering.
    for (const endpoint of ['events', 'steered']) {
      const { history } = (await call(`${host('host-b').node.url}/v1/endpoints/${endpoint}/generations`))
        .body;
      expect(history.filter((h: { from: string | null }) => h.from !== null)).toEqual([]);
    }
  });

  it("defect: an api-server started from the shared sluice.yaml without its host's node id (as examples/cluster/run.sh starts them) never heard its host's alias events", async () => {
    const a = host('host-a');
    // The cluster recipe's api-server: the host's dataDir, but the node id of the shared file (none: `local`).
    const port = await freePort();
    await using api = await startHostApiServer(a.node, {
      SLUICE_API_PORT: String(port),
      SLUICE_NODE_ID: 'local',
    });
    const url = `http://127.0.0.1:${port}`;
    const blue = (await endpointsSettled(a.node)).events;
    await waitFor(async () => (await answeringCache(url)) === blue, {
      timeoutMs: 30_000,
      what: `${url} to serve`,
    });
    const rebuild = await call(`${a.node.url}/v1/endpoints/events/rebuild`, { method: 'POST' });
    expect(rebuild.status).toBe(202);
    const green = await waitFor(
      async () => {
        const events = await endpointOf(a.node, 'events');
        return events?.buildingCache === null && events.servingCache !== blue ? events.servingCache : null;
      },
      { timeoutMs: 60_000, what: "host A's rebuild to switch" },
    );
    await waitFor(async () => (await answeringCache(url)) === green, {
      timeoutMs: 15_000,
      what: `${url} to serve A's new generation`,
    });
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics.match(/^sluice_api_switches_total\{endpoint="events",reason="[a-z]+"\} \d+$/gm)).toEqual([
      'sluice_api_switches_total{endpoint="events",reason="event"} 1',
    ]);
    expect(api.output()).not.toContain('error');
  });

  it('host A lost: B takes its transfer over exactly once, B keeps serving, A restarted resumes from its dataDir and a resend answers the stored outcome', async () => {
    const a = host('host-a');
    const b = host('host-b');
    const writes = await createCountedDestination(destinationUrl);
    const input = await writeRecords(files('orders.jsonl'), 1_500);
    const request = {
      ...fileTransfer('orders-1', input, files('unused.jsonl'), 500),
      destination: { type: 'postgres', connection: 'dst', table: 'dst', key: 'id' },
    };
    const submitted = await call(`${a.node.url}/v1/transfers`, { json: request });
    expect(submitted.status).toBe(201);
    expect(submitted.body.owner.nodeId).toBe('host-a');
    await waitFor(
      async () => {
        const record = await store.get('orders-1');
        return record?.checkpoint && record.state === 'IN_PROGRESS' ? record : null;
      },
      { timeoutMs: 20_000, intervalMs: 50, what: 'a checkpoint of orders-1' },
    );
    const aServing = await endpointsSettled(a.node);
    const aGenerations = (await call(`${a.node.url}/v1/endpoints/items/generations`)).body.generations.length;
    const bServing = await endpointsSettled(b.node);

    // Host A lost entirely.
    await Promise.all([...a.apis.map((api) => api.stop('SIGKILL')), a.node.child.stop('SIGKILL')]);
    hosts.delete('host-a');

    const takeover = await call(`${b.node.url}/v1/transfers`, { json: request });
    expect([201, 202], JSON.stringify(takeover.body)).toContain(takeover.status);
    const done = await waitForState(b.node.url, 'orders-1', 'COMPLETED', 60_000);
    expect(done.owner.nodeId).toBe('host-b');
    expect(done.result).toMatchObject({ recordsRead: 1_500, recordsWritten: 1_500 });
    expect(await writes.counts()).toEqual({ n: 1_500, d: 1_500 });

    for (const url of apiUrls(b)) {
      expect(await answeringCache(url, 'events')).toBe(bServing.events);
      expect(await answeringCache(url, 'items')).toBe(bServing.items);
    }

    // Host A restarted from its own dataDir: resumes, no new generation.
    const aAgain = await startHost('host-a', { ...a.spec });
    expect(await endpointsSettled(aAgain.node)).toEqual(aServing);
    expect((await endpointOf(aAgain.node, 'items')).decision?.decision).toBe('resume');
    expect((await call(`${aAgain.node.url}/v1/endpoints/items/generations`)).body.generations).toHaveLength(
      aGenerations,
    );
    for (const url of apiUrls(host('host-a')))
      await waitFor(async () => (await answeringCache(url, 'items')) === aServing.items, {
        timeoutMs: 30_000,
        what: `${url} to serve A's items`,
      });

    for (const node of [aAgain.node, b.node]) {
      const resend = await call(`${node.url}/v1/transfers`, { json: request });
      expect(resend.status, node.url).toBe(200);
      expect(resend.body).toMatchObject({
        state: 'COMPLETED',
        owner: { nodeId: 'host-b' },
        epoch: done.epoch,
      });
      expect(resend.body.result).toEqual(done.result);
    }
    expect(await writes.counts()).toEqual({ n: 1_500, d: 1_500 });
  });

  it('defect: a host whose node id differs from another only in punctuation (host_a beside host-a) took its replication slot while host-a restarted, and host-a then rebuilt from scratch', async () => {
    const a = host('host-a');
    const before = await endpointsSettled(a.node);
    const generations = (await call(`${a.node.url}/v1/endpoints/items/generations`)).body.generations.length;
    // A planned restart of host A; meanwhile a host named `host_a` starts on the same sources.
    await Promise.all(a.apis.map((api) => api.stop('SIGTERM')));
    await a.node.child.stop('SIGTERM');
    hosts.delete('host-a');
    {
      await using look = await startNodeProcess({
        ...a.spec,
        nodeId: 'host_a',
        dir: join(dir.path, 'host_a'),
        port: undefined,
      });
      const items = await waitFor(
        async () => {
          const view = await endpointOf(look, 'items');
          return view && (view.phase === 'streaming' || view.phase === 'failed') ? view : null;
        },
        { timeoutMs: 60_000, what: "host_a's items to stream or fail" },
      );
      expect(items.phase).toBe('failed');
      expect(items.error?.code).toBe('SLOT_OF_ANOTHER_NODE');
      expect(items.error?.message).toContain('host-a');
    }
    const again = await startHost('host-a', a.spec);
    expect(await endpointsSettled(again.node)).toEqual(before);
    expect((await endpointOf(again.node, 'items')).decision?.decision).toBe('resume');
    expect((await call(`${again.node.url}/v1/endpoints/items/generations`)).body.generations).toHaveLength(
      generations,
    );
  });
});
