/**
 * A rebuild that finishes while the host's nats-server is stopped (SIGTERM: every connection closed, unlike the hung
 * server of switch-hung-nats.test.ts), and NATS started again afterwards. What the host's users see: both of its
 * api-servers — their periodic reconcile set far away, so it cannot explain a switch — serve the rebuilt generation and
 * answer read-your-writes (`sluice-min-position`) for what it committed, during the outage and after it, and once
 * NATS runs again the switch's `AliasRedirected` reaches a subscriber that was there all along and the KV bucket a
 * later process reads.
 *
 * A real app-server and two api-server processes, a private PostgreSQL with `wal_level=logical` with a writer
 * committing the whole time, and a private nats-server stopped for the rebuild's finish.
 */
import { createNatsBackplane } from '@sluice/backplane';
import { freePort, sql, startItemsWriter, startNatsServer, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  localNode,
  type NodeProcess,
  observeEvents,
  servingItems,
  startHostApiServer,
} from './helpers.js';
import { currentLsn } from './items-rows.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import {
  itemsOf,
  itemsTable,
  lsnReached,
  replicatedEndpointYaml,
  startItemsHost,
} from './replication-node.js';

const postgres = logicalPostgresPerFile();

/** Read-your-writes waits this long (the product's default) before `503 POSITION_NOT_REACHED`. */
const FRESHNESS_WAIT_MS = 2_000;
const ROWS = 5_000;

/** What a read-your-writes read answered: status, error code, generation and the row's id. */
interface FreshRead {
  api: string;
  status: number;
  code: unknown;
  cache: string | null;
  id: unknown;
}

/**
 * Inserts row `id`, waits until the serving generation has committed it (as the app-server reports), and reads it
 * back through each api-server of `apis` with `sluice-min-position`. Waiting for the commit first leaves one cause
 * for a `503 POSITION_NOT_REACHED`: an api-server reading another generation than the one serving — what this file
 * checks — not a commit slower than `freshnessWaitMs` on a loaded machine.
 */
async function readYourWrite(
  url: string,
  node: Pick<NodeProcess, 'url'>,
  apis: readonly string[],
  id: number,
): Promise<FreshRead[]> {
  await sql(url, `INSERT INTO items VALUES (${id}, ${id}, 'while NATS is stopped')`);
  const position = await currentLsn(url);
  await waitFor(
    async () => {
      const committed = (await itemsOf(node)).replication?.committedLsn;
      return committed != null && (await lsnReached(url, committed, position));
    },
    { timeoutMs: 60_000, what: `the serving generation to commit ${position}` },
  );
  const reads: FreshRead[] = [];
  for (const [i, api] of apis.entries()) {
    const reply = await call(`${api}/v1/endpoints/items/records/${id}`, {
      headers: { 'sluice-min-position': position },
    });
    reads.push({
      api: `api-${i + 1}`,
      status: reply.status,
      code: reply.body?.code,
      cache: reply.headers.get('sluice-cache'),
      id: reply.body?.id,
    });
  }
  return reads;
}

const servedBy = (cache: string, id: number): FreshRead[] =>
  ['api-1', 'api-2'].map((api) => ({ api, status: 200, code: undefined, cache, id }));

describe('a rebuild finishing while NATS is stopped', () => {
  it('both api-servers of the host serve the rebuilt generation (read-your-writes answered) during the outage and after it, and its AliasRedirected reaches NATS once it is back', {
    timeout: 240_000,
  }, async () => {
    await using nats = await startNatsServer();
    await using dir = await tempDir('sluice-nats-stopped-');
    const url = await itemsTable(postgres(), 'natsstopped', { rows: ROWS });
    const apiPort = await freePort();
    await using host = await startItemsHost(
      {
        ...localNode('h1', dir.path),
        nats: nats.url,
        extraYaml: [
          // The periodic reconcile cannot explain a switch within this test.
          `api: { port: ${apiPort}, freshnessWaitMs: ${FRESHNESS_WAIT_MS}, reconcileMs: 600000 }`,
          replicatedEndpointYaml(url, { keepGenerations: true }),
        ].join('\n'),
        pipeline: { commitEveryRecords: 1_000, commitEveryMs: 50 },
      },
      { apiPort, records: ROWS },
    );
    const secondPort = await freePort();
    await using _second = await startHostApiServer(host.node, { SLUICE_API_PORT: String(secondPort) });
    const apis = [host.api, `http://127.0.0.1:${secondPort}`];
    const blue = host.streaming.servingCache!;
    await using observer = await observeEvents(nats.url);
    await using writer = startItemsWriter(url, ROWS);
    await waitFor(() => writer.written >= 10, { what: 'the writer to commit' });
    expect(await readYourWrite(url, host.node, apis, 800_000)).toEqual(servedBy(blue, 800_000));

    await nats.stop();
    await waitFor(
      async () => {
        for (const base of [host.node.url, ...apis])
          if (['up', 'connected'].includes((await call(`${base}/readyz`)).body?.backplane)) return false;
        return true;
      },
      { timeoutMs: 15_000, what: 'the app-server and both api-servers to notice NATS is gone' },
    );
    expect((await call(`${host.node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const green = await waitFor(
      async () => {
        const serving = await servingItems(host.node.url);
        return serving !== null && serving !== blue ? serving : null;
      },
      {
        timeoutMs: 120_000,
        intervalMs: 50,
        what: 'the switch to the rebuilt generation while NATS is stopped',
      },
    );
    const during = await readYourWrite(url, host.node, apis, 800_001);

    await nats.start();
    await waitFor(() => observer.events.some((e) => e.type === 'AliasRedirected' && e.to === green), {
      timeoutMs: 30_000,
      what: `the AliasRedirected to ${green} on NATS once it runs again (heard: ${JSON.stringify(observer.events.map((e) => e.type))})`,
    });
    await waitFor(
      async () => {
        for (const base of apis)
          if ((await call(`${base}/readyz`)).body?.backplane !== 'connected') return false;
        return true;
      },
      { timeoutMs: 20_000, what: 'both api-servers to reconnect' },
    );
    const after = await readYourWrite(url, host.node, apis, 800_002);
    await writer.stop();

    expect(during, JSON.stringify(during)).toEqual(servedBy(green, 800_001));
    expect(after, JSON.stringify(after)).toEqual(servedBy(green, 800_002));
    await using late = await createNatsBackplane({ nats: nats.url, clusterName: 'sluice', nodeId: 'late' });
    expect(
      (await late.latestAliasEvents()).map((e) => (e.type === 'AliasRedirected' ? [e.alias, e.to] : e.type)),
    ).toEqual([['items', green]]);
    // Each api-server switched once, and from the alias table it watches while it has no connection: no periodic
    // reconcile, and no event, explains it.
    for (const base of apis) {
      const metrics = await (await fetch(`${base}/metrics`)).text();
      expect(
        metrics.split('\n').filter((line) => line.startsWith('sluice_api_switches_total')),
        base,
      ).toEqual(['sluice_api_switches_total{endpoint="items",reason="watch"} 1']);
    }
  });
});
