/**
 * Replication lag as `GET /v1/endpoints` and `/metrics` report it, against a real PostgreSQL with
 * `wal_level=logical`: the walsender that streams the endpoint's slot is stopped (SIGSTOP) while the table is
 * written, so the pipeline is held back while the app-server keeps answering; the lag in bytes and seconds goes up,
 * and after SIGCONT the endpoint catches up and both go back to about zero.
 */
import { sleep, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { call, localNode, type NodeProcess, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import {
  databaseWith,
  type EndpointView,
  itemsOf,
  itemsStreaming,
  replicatedEndpointYaml,
} from './replication-node.js';

const postgres = logicalPostgresPerFile();

async function metric(node: NodeProcess, name: string): Promise<number | null> {
  const text = (await call(`${node.url}/metrics`)).body as string;
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes('endpoint="items"'));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('replication lag reporting', () => {
  it('lag bytes and seconds go up while the walsender is stopped, and back to about zero once it runs', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-lag-');
    const url = await databaseWith(
      postgres(),
      'lag',
      'CREATE TABLE items (id int PRIMARY KEY, v int, pad text)',
      'INSERT INTO items SELECT g, g, NULL FROM generate_series(1, 100) g',
    );
    await using node = await startNodeProcess({
      ...localNode('h3', dir.path),
      extraYaml: replicatedEndpointYaml(url, {
        fields: '{ id: integer, v: integer, pad: string }',
        indexes: '[[v]]',
      }),
    });
    await itemsStreaming(node, { records: 100 });
    // Settled: nothing behind.
    const settled = await waitFor(
      async () => {
        const r = (await itemsOf(node)).replication!;
        return r.lagBytes !== null && r.lagBytes < 1024 && r.lagSeconds! < 1 ? r : null;
      },
      { timeoutMs: 30_000, what: 'the idle lag to be about zero' },
    );
    expect(settled.slot).toBe('sluice_h3_items_source');

    const pid = await waitFor(
      async () =>
        (
          await sql<{ pid: number | null }>(
            url,
            'SELECT active_pid AS pid FROM pg_replication_slots WHERE slot_name = $1',
            [settled.slot],
          )
        )[0]?.pid ?? null,
      { what: 'the walsender of the slot' },
    );
    expect(pid).toBeGreaterThan(0);
    process.kill(pid, 'SIGSTOP');
    let held: NonNullable<EndpointView['replication']>;
    try {
      // Writes keep coming while nothing reaches the endpoint.
      for (let batch = 0; batch < 5; batch++) {
        await sql(
          url,
          `INSERT INTO items SELECT g, g, repeat('x', 200) FROM generate_series(${1000 + batch * 1000}, ${1999 + batch * 1000}) g`,
        );
        await sleep(400);
      }
      held = await waitFor(
        async () => {
          const r = (await itemsOf(node)).replication!;
          return r.lagBytes! > 500_000 && r.lagSeconds! >= 1.5 ? r : null;
        },
        { timeoutMs: 10_000, what: 'the lag to show the stalled stream' },
      );
      expect((await itemsOf(node)).records).toBe(100);
      expect(await metric(node, 'sluice_replication_lag_bytes')).toBeGreaterThan(500_000);
      expect(await metric(node, 'sluice_replication_lag_seconds')).toBeGreaterThanOrEqual(1.5);
      // Still held back: the seconds keep growing.
      await sleep(1_000);
      expect((await itemsOf(node)).replication!.lagSeconds!).toBeGreaterThan(held.lagSeconds! + 0.5);
    } finally {
      process.kill(pid, 'SIGCONT');
    }

    await waitFor(async () => (await itemsOf(node)).records === 5_100, {
      timeoutMs: 30_000,
      what: 'the endpoint to catch up',
    });
    const after = await waitFor(
      async () => {
        const r = (await itemsOf(node)).replication!;
        return r.lagBytes! < 1024 && r.lagSeconds! < 1 ? r : null;
      },
      { timeoutMs: 30_000, what: 'the lag to fall back to about zero' },
    );
    expect(after.committedLsn).not.toBe(settled.committedLsn);
    await waitFor(async () => ((await metric(node, 'sluice_replication_lag_bytes')) ?? Infinity) < 1024, {
      timeoutMs: 10_000,
      what: 'the lag metric to fall back',
    });
    expect(await metric(node, 'sluice_replication_lag_seconds')).toBeLessThan(1);
  });
});
