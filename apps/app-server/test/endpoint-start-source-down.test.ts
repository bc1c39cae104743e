/**
 * An app-server restarted while its endpoint's PostgreSQL is down (restarting, a network cut) against a real private
 * PostgreSQL with `wal_level=logical`: the pipeline cannot start, and must start by itself once PostgreSQL answers —
 * the failure is a lost connection (retryable), not a misconfiguration waiting for an operator's Rebuild. Found by the
 * CDC chaos run with overlapping faults (an app-server SIGKILL during a PostgreSQL restart).
 */
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { localNode, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { databaseWith, itemsOf, replicatedEndpointYaml } from './replication-node.js';

const postgres = logicalPostgresPerFile();

/** A node under `dir` with endpoint `items` over a new database `database` whose `items (id, v)` has 30 rows. */
async function itemsNodeSpec(database: string, dir: string) {
  const url = await databaseWith(
    postgres(),
    database,
    'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)',
    'INSERT INTO items SELECT g, g FROM generate_series(1, 30) g',
  );
  return {
    url,
    spec: {
      ...localNode('h1', dir),
      extraYaml: replicatedEndpointYaml(url, { fields: '{ id: integer, v: integer }' }),
    },
  };
}

/** `sluice_endpoint_phase` of endpoint `items` for the phases these tests look at, as `/metrics` shows it. */
async function phaseMetrics(nodeUrl: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${nodeUrl}/metrics`)).text();
  const value = (phase: string) => {
    const line = text
      .split('\n')
      .find((l) => l.startsWith(`sluice_endpoint_phase{endpoint="items",phase="${phase}"}`));
    return line === undefined ? Number.NaN : Number(line.split(' ').at(-1));
  };
  return { retrying: value('retrying'), failed: value('failed'), streaming: value('streaming') };
}

describe('an endpoint whose source is down at start-up', () => {
  it('defect: an endpoint whose start is being retried is shown as failed, as if an operator had to act', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-source-retrying-');
    const { spec } = await itemsNodeSpec('retrying', dir.path);

    // The first start of the endpoint happens while PostgreSQL is down: an outage Sluice waits out by itself.
    await postgres().stop('fast');
    try {
      await using node = await startNodeProcess(spec);
      const first = await itemsOf(node);
      expect(first).toMatchObject({
        phase: 'retrying',
        error: { code: 'SOURCE_FAILED' },
        retry: { attempts: expect.any(Number) },
      });
      expect(first.retry!.attempts).toBeGreaterThanOrEqual(1);
      // Still down: the attempts go on, each failure counted, the next one announced.
      const later = await waitFor(
        async () => {
          const status = await itemsOf(node);
          return (status.retry?.attempts ?? 0) > first.retry!.attempts && status.retry?.nextAttemptAt
            ? status
            : null;
        },
        { timeoutMs: 30_000, what: 'another attempt to start the endpoint' },
      );
      expect(later).toMatchObject({ phase: 'retrying', error: { code: 'SOURCE_FAILED' } });
      expect(Number.isNaN(Date.parse(later.retry!.nextAttemptAt!))).toBe(false);
      // The metrics say the same, for an alert on `failed` that does not fire on an outage.
      expect(await phaseMetrics(node.url)).toEqual({ retrying: 1, failed: 0, streaming: 0 });

      // PostgreSQL is back: the endpoint starts by itself, and nothing says it failed or retries any more.
      await postgres().start();
      const serving = await waitFor(
        async () => {
          const status = await itemsOf(node);
          return status.records === 30 && status.phase === 'streaming' ? status : null;
        },
        { timeoutMs: 60_000, what: 'the endpoint to start by itself once PostgreSQL is back' },
      );
      expect(serving).toMatchObject({ error: null, retry: null });
      expect(await phaseMetrics(node.url)).toEqual({ retrying: 0, failed: 0, streaming: 1 });
    } finally {
      await postgres().start();
    }
  });

  it('defect: an app-server started while PostgreSQL is down leaves the endpoint failed until someone rebuilds it', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-source-down-');
    const { url, spec } = await itemsNodeSpec('down', dir.path);

    // First life: the endpoint serves its snapshot (a cache, a slot, a checkpoint to resume from).
    {
      await using first = await startNodeProcess(spec);
      await waitFor(async () => (await itemsOf(first))?.records === 30, {
        timeoutMs: 60_000,
        what: 'the first snapshot',
      });
    }

    // Second life starts while PostgreSQL is down: the pipeline cannot start, for now.
    await postgres().stop('fast');
    await using node = await startNodeProcess(spec);
    // Listed as retrying by itself (docs/operations.md), never as failed: nothing for an operator to do.
    expect(await itemsOf(node)).toMatchObject({
      phase: 'retrying',
      error: { code: 'SOURCE_FAILED' },
      retry: { attempts: expect.any(Number) },
    });

    // PostgreSQL is back and the table changes: the endpoint resumes and follows, with no Rebuild from anyone.
    await postgres().start();
    await sql(url, 'INSERT INTO items VALUES (31, 31)');
    await waitFor(async () => (await itemsOf(node))?.records === 31, {
      timeoutMs: 60_000,
      what: 'the endpoint to start by itself and stream the change made after PostgreSQL came back',
    });
    expect(await itemsOf(node)).toMatchObject({
      phase: expect.not.stringMatching(/^(failed|retrying)$/),
      error: null,
      retry: null,
      decision: { decision: 'resume' },
    });
  });
});
