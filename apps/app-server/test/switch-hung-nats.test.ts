/**
 * Switches of a logical-replication endpoint while the host's nats-server hangs (SIGSTOP — as a partition that drops
 * packets without resets does: every connection still counts as up, and nothing asked of NATS is answered). The
 * backplane coordinates; it must never stop data from flowing (DESIGN.md § Endpoints): the generation serving from a
 * switch on keeps committing what the source writes, so read-your-writes (`sluice-min-position`) through the host's
 * api-server — which follows the alias table itself — is answered within `api.freshnessWaitMs`. Once NATS runs
 * again, the switches' events reach it all the same.
 *
 * A real app-server and api-server process, a private PostgreSQL with `wal_level=logical` with a writer committing the
 * whole time, and a private nats-server paused for the switches.
 */
import type { SluiceEvent } from '@sluice/core';
import {
  freePort,
  type NatsServerHandle,
  type SourceWriter,
  sql,
  startItemsWriter,
  startNatsServer,
  tempDir,
  waitFor,
} from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, type NodeProcess, observeEvents, servingItems } from './helpers.js';
import { currentLsn } from './items-rows.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { itemsTable, replicatedEndpointYaml, startItemsHost } from './replication-node.js';

const postgres = logicalPostgresPerFile();

/** Read-your-writes waits this long (the product's default) before `503 POSITION_NOT_REACHED`. */
const FRESHNESS_WAIT_MS = 2_000;
const ROWS = 5_000;

/** A host serving `items` from a replicated table under a writer, its NATS private; dispose stops all of it. */
interface HungNatsHost extends AsyncDisposable {
  readonly nats: NatsServerHandle;
  readonly node: NodeProcess;
  readonly api: string;
  readonly url: string;
  readonly blue: string;
  readonly events: SluiceEvent[];
  readonly writer: SourceWriter;
}

async function startHungNatsHost(database: string): Promise<HungNatsHost> {
  // Stopped in reverse order of start, also when a later step fails.
  const started: AsyncDisposable[] = [];
  const stopAll = async () => {
    for (const resource of started.reverse()) await resource[Symbol.asyncDispose]();
  };
  const use = <T extends AsyncDisposable>(resource: T): T => {
    started.push(resource);
    return resource;
  };
  try {
    const nats = use(await startNatsServer());
    const dir = use(await tempDir(`sluice-hung-nats-${database}-`));
    const url = await itemsTable(postgres(), database, { rows: ROWS });
    const apiPort = await freePort();
    const host = use(
      await startItemsHost(
        {
          ...localNode('h1', dir.path),
          nats: nats.url,
          extraYaml: [
            `api: { port: ${apiPort}, freshnessWaitMs: ${FRESHNESS_WAIT_MS} }`,
            replicatedEndpointYaml(url, { keepGenerations: true }),
          ].join('\n'),
          pipeline: { commitEveryRecords: 1_000, commitEveryMs: 50 },
        },
        { apiPort, records: ROWS },
      ),
    );
    const observer = use(await observeEvents(nats.url));
    const writer = use(startItemsWriter(url, ROWS));
    await waitFor(() => writer.written >= 10, { what: 'the writer to commit' });
    return {
      nats,
      node: host.node,
      api: host.api,
      url,
      blue: host.streaming.servingCache!,
      events: observer.events,
      writer,
      [Symbol.asyncDispose]: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/** What a read-your-writes read of a row written now answered: status, error code, generation and the row's id. */
interface FreshRead {
  status: number;
  code: unknown;
  cache: string | null;
  id: unknown;
  detail?: unknown;
}

/** Inserts rows `firstId`… one at a time and reads each back through the api-server with `sluice-min-position`. */
async function readYourWrites(host: HungNatsHost, firstId: number, count: number): Promise<FreshRead[]> {
  const reads: FreshRead[] = [];
  for (let id = firstId; id < firstId + count; id++) {
    await sql(host.url, `INSERT INTO items VALUES (${id}, ${id}, 'while NATS hangs')`);
    const reply = await call(`${host.api}/v1/endpoints/items/records/${id}`, {
      headers: { 'sluice-min-position': await currentLsn(host.url) },
    });
    reads.push({
      status: reply.status,
      code: reply.body?.code,
      cache: reply.headers.get('sluice-cache'),
      id: reply.body?.id,
      ...(reply.status === 200 ? {} : { detail: reply.body?.detail }),
    });
  }
  return reads;
}

/** Every read answered 200 by `cache` with its own row. */
const servedBy = (cache: string, firstId: number, count: number): FreshRead[] =>
  Array.from({ length: count }, (_, i) => ({ status: 200, code: undefined, cache, id: firstId + i }));

/** Waits for the generation `node` serves `items` from to be `wanted(serving)`, polling fast. */
const servingWhen = (node: NodeProcess, wanted: (serving: string) => boolean, what: string) =>
  waitFor(
    async () => {
      const serving = await servingItems(node.url);
      return serving !== null && wanted(serving) ? serving : null;
    },
    { timeoutMs: 120_000, intervalMs: 50, what },
  );

/**
 * Whether `node` has logged, since this was called, that an `AliasRedirected` it announced ended without NATS taking
 * it — kept by its backplane to publish later, or not published — i.e. that the announce is over.
 */
function announceEndWatch(node: NodeProcess): () => boolean {
  const from = node.child.lines.length;
  return () =>
    node.child.lines
      .slice(from)
      .some((line) => /AliasRedirected kept by the backplane|could not publish AliasRedirected/.test(line));
}

describe('switches while NATS hangs', () => {
  it('defect: while NATS hung, the rebuilt generation stopped committing from its switch until NATS answered, and reads of new writes got 503 POSITION_NOT_REACHED', {
    timeout: 240_000,
  }, async () => {
    await using host = await startHungNatsHost('hungrebuild');
    const { nats, node, blue } = host;
    let green: string;
    let reads: FreshRead[];
    nats.pause();
    try {
      expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
      green = await servingWhen(
        node,
        (s) => s !== blue,
        'the switch to the rebuilt generation while NATS hangs',
      );
      // Writes made after the switch, NATS still hung: each is served by the new generation within the wait.
      reads = await readYourWrites(host, 900_000, 5);
    } finally {
      nats.resume();
      await host.writer.stop();
    }
    expect(reads, JSON.stringify(reads)).toEqual(servedBy(green, 900_000, 5));
    // Nothing was given up for it: once NATS runs again, both events of the switch reach it.
    await waitFor(
      () =>
        host.events.some((e) => e.type === 'SnapshottingDone' && e.cache === green) &&
        host.events.some((e) => e.type === 'AliasRedirected' && e.to === green && e.from === blue),
      {
        timeoutMs: 30_000,
        what: `SnapshottingDone and AliasRedirected of ${green} on NATS (heard: ${JSON.stringify(host.events.map((e) => e.type))})`,
      },
    );
  });

  it("a rollback while NATS hangs: the rolled-back generation serves a new write while the rollback's AliasRedirected is still unanswered, keeps up with its source, and the event arrives once NATS runs again", {
    timeout: 240_000,
  }, async () => {
    await using host = await startHungNatsHost('hungrollback');
    const { nats, node, blue } = host;
    expect((await call(`${node.url}/v1/endpoints/items/rebuild`, { method: 'POST' })).status).toBe(202);
    const green = await servingWhen(node, (s) => s !== blue, 'the switch to the rebuilt generation');
    await waitFor(() => host.events.some((e) => e.type === 'AliasRedirected' && e.to === green), {
      what: 'the redirect to the rebuilt generation on NATS',
    });

    let firstServed: { read: FreshRead | undefined; announceEnded: boolean };
    let reads: FreshRead[];
    let rollback: Promise<Awaited<ReturnType<typeof call>>> | null = null;
    nats.pause();
    // The rollback's announce cannot end while NATS hangs before the backplane's own timeout gives up on it (it then
    // logs that it kept the redirect): what the app-server logs from here on tells whether it has ended yet.
    const announceEnded = announceEndWatch(node);
    try {
      rollback = call(`${node.url}/v1/endpoints/items/rollback`, { method: 'POST' });
      await servingWhen(node, (s) => s === blue, 'the rollback to move the alias back while NATS hangs');
      // The rolled-back generation first catches up from its own checkpoint (it stopped following at the switch, and
      // the writer went on). Its first read of a new write must come while the announce is still unanswered: a
      // rollback that waited for the announce again would resume the generation only after the announce ended.
      let probe = 909_000;
      firstServed = await waitFor(
        async () => {
          const [read] = await readYourWrites(host, probe++, 1);
          return read?.status === 200 ? { read, announceEnded: announceEnded() } : null;
        },
        { timeoutMs: 90_000, what: 'the rolled-back generation to serve a new write while NATS hangs' },
      );
      // Caught up, it keeps up: each write made now, NATS still hung, is served by it within the freshness window.
      reads = await readYourWrites(host, 910_000, 5);
      // The marker the first read was compared with does come, NATS still hung (else the comparison proved nothing).
      await waitFor(announceEnded, {
        timeoutMs: 90_000,
        what: "the app-server to log the end of the rollback's announce (kept by the backplane) while NATS hangs",
      });
    } finally {
      nats.resume();
      await rollback;
      await host.writer.stop();
    }
    expect(firstServed, JSON.stringify(firstServed)).toEqual({
      read: { status: 200, code: undefined, cache: blue, id: expect.any(Number) },
      announceEnded: false,
    });
    expect(reads, JSON.stringify(reads)).toEqual(servedBy(blue, 910_000, 5));
    expect((await rollback).body).toMatchObject({ from: green, to: blue, cause: 'rollback', changed: true });
    await waitFor(
      () =>
        host.events.some(
          (e) => e.type === 'AliasRedirected' && e.from === green && e.to === blue && e.cause === 'rollback',
        ),
      { timeoutMs: 30_000, what: 'the AliasRedirected of the rollback on NATS once it runs again' },
    );
  });
});
