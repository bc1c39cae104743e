/**
 * A replication endpoint whose source fails again and again, on a private PostgreSQL with `wal_level=logical`: how soon
 * it retries after an outage that came after another one (the back-off starts over once a run recovered), and what
 * its replication lag reads while it retries — growing while PostgreSQL answers but the stream keeps failing (its
 * slot read by another process), the last figures measured, with when, while PostgreSQL is down.
 */
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import type {
  EndpointConfig,
  EndpointPipeline,
  EndpointPipelineStatus,
  WritableCacheCatalog,
} from '@sluice/core';
import { sql, takeReplicationSlot, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { itemsTableEndpoint, replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { type EndpointContext, startEndpointPipeline } from '../endpoint.js';

const server = useLogicalPostgres();

/** The first wait of the back-off (it doubles from there, up to 30 s). */
const RETRY_MS = 250;
/** How long a run waits for a slot another process reads before it fails (retried). */
const SLOT_WAIT_MS = 500;

/** A database with the table `items (id, v)` of 20 rows; its URL. */
async function itemsDatabase(prefix: string): Promise<string> {
  const url = await server.createDatabase(prefix);
  await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)');
  await sql(url, 'INSERT INTO items SELECT g, g FROM generate_series(1, 20) g');
  return url;
}

/** Starts the endpoint `items` (a green held until promoted with `manual`) and waits for it to serve. */
async function startItems(
  caches: WritableCacheCatalog,
  url: string,
  manual = false,
  overrides: Partial<EndpointContext> = {},
): Promise<EndpointPipeline> {
  const config = {
    ...itemsTableEndpoint(),
    fields: { id: 'integer', v: 'integer' },
    ...(manual ? { switch: { mode: 'manual' } } : {}),
  } as EndpointConfig;
  const pipeline = await startEndpointPipeline(
    config,
    replicationContext(caches, url, {
      retryMs: RETRY_MS,
      replication: { keepaliveMs: 200, slotWaitMs: SLOT_WAIT_MS },
      ...overrides,
    }),
  );
  await pipeline.whenServing({ timeoutMs: 30_000 });
  return pipeline;
}

/** True when `lsn` is at or past `target` (PostgreSQL compares them). */
const reached = async (url: string, lsn: string | null | undefined, target: string) =>
  lsn != null &&
  (await sql<{ ok: boolean }>(url, 'SELECT $1::pg_lsn >= $2::pg_lsn AS ok', [lsn, target]))[0]!.ok;

const currentLsn = async (url: string) =>
  (await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn'))[0]!.lsn;

/** Writes a row and waits until the endpoint streams with it committed and nothing said about retrying. */
async function streamsWithWrite(pipeline: EndpointPipeline, url: string, id: number): Promise<void> {
  await sql(url, 'INSERT INTO items VALUES ($1, $1)', [id]);
  const target = await currentLsn(url);
  await waitFor(
    async () => {
      const s = pipeline.status();
      return (
        s.retry === null && s.replication?.lagBytes === 0 && reached(url, s.replication.committedLsn, target)
      );
    },
    { timeoutMs: 60_000, what: `row ${id} to be committed (${JSON.stringify(pipeline.status().retry)})` },
  );
}

/** A retry as the status shows it, and when it was seen (epoch ms). */
type SeenRetry = { attempts: number; nextAttemptAt: string; seenAt: number };

/** Waits for `retryOf` to name when the next attempt is due; polled often, so the first wait is seen whole. */
const firstRetryWait = (
  retryOf: () => { attempts: number; nextAttemptAt: string | null } | null | undefined,
) =>
  waitFor(
    (): SeenRetry | null => {
      const retry = retryOf();
      return retry?.nextAttemptAt
        ? { ...retry, nextAttemptAt: retry.nextAttemptAt, seenAt: Date.now() }
        : null;
    },
    { timeoutMs: 30_000, intervalMs: 5, what: 'a retry to be due' },
  );

/** How long after it was seen the retry is due (ms). */
const dueIn = (retry: SeenRetry) => Date.parse(retry.nextAttemptAt) - retry.seenAt;

/**
 * Stops PostgreSQL until `retryOf` shows the back-off has climbed to `attempts` failed attempts in a row (the next
 * wait is then 2^(attempts−1) times the first), then starts it again; returns the climbed retry.
 */
async function outageClimbing(
  retryOf: () => { attempts: number; nextAttemptAt: string | null } | null | undefined,
  attempts: number,
): Promise<SeenRetry> {
  await server.handle.stop('fast');
  try {
    return await waitFor(
      (): SeenRetry | null => {
        const retry = retryOf();
        return retry?.nextAttemptAt && retry.attempts >= attempts
          ? { ...retry, nextAttemptAt: retry.nextAttemptAt, seenAt: Date.now() }
          : null;
      },
      { timeoutMs: 60_000, intervalMs: 5, what: `${attempts} failed attempts in a row` },
    );
  } finally {
    await server.handle.start();
  }
}

describe('a replication endpoint retrying after an outage that followed another', () => {
  it('defect: after an outage that climbed the back-off, the next outage waited the climbed back-off before its first retry', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await itemsDatabase('backoff');
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startItems(caches, url);
    try {
      await streamsWithWrite(pipeline, url, 100);
      // The first outage lasts until the back-off climbed: the next retry waits 8 times the first one, or more.
      const climbed = await outageClimbing(() => pipeline.status().retry, 4);
      expect(dueIn(climbed)).toBeGreaterThan(2 * RETRY_MS);
      // It recovered: streams again, committing what was written since.
      await streamsWithWrite(pipeline, url, 101);

      // The second outage is a new one: its first retry is due after the first wait, as if the first had not been.
      await server.handle.stop('fast');
      try {
        const first = await firstRetryWait(() => pipeline.status().retry);
        expect(first.attempts).toBe(1);
        expect(dueIn(first)).toBeLessThanOrEqual(RETRY_MS);
      } finally {
        await server.handle.start();
      }
      await streamsWithWrite(pipeline, url, 102);
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });

  it("defect: after an outage that climbed the back-off, the serving generation's follower waited the climbed back-off before its first retry of the next outage", {
    timeout: 150_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await itemsDatabase('followerbackoff');
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startItems(caches, url, true);
    try {
      await pipeline.rebuild();
      await waitFor(() => pipeline.status().held, { timeoutMs: 30_000, what: 'the green to be held' });
      /** Writes a row and waits until the serving generation's follower has committed it. */
      const follows = async (what: string) => {
        await sql(url, 'UPDATE items SET v = v + 1 WHERE id = 1');
        const target = await currentLsn(url);
        return waitFor(
          async () => {
            const follower = pipeline.status().follower;
            return follower?.phase === 'following' && (await reached(url, follower.lastCommit?.lsn, target));
          },
          { timeoutMs: 60_000, what: `${what} (${JSON.stringify(pipeline.status().follower)})` },
        );
      };
      await follows('the serving generation to follow');
      const climbed = await outageClimbing(() => pipeline.status().follower?.retry, 4);
      expect(dueIn(climbed)).toBeGreaterThan(2 * RETRY_MS);
      // It recovered: the serving generation follows again and commits what was written since.
      await follows('the serving generation to follow again');

      await server.handle.stop('fast');
      try {
        const first = await firstRetryWait(() => pipeline.status().follower?.retry);
        expect(first.attempts).toBe(1);
        expect(dueIn(first)).toBeLessThanOrEqual(RETRY_MS);
      } finally {
        await server.handle.start();
      }
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});

/** The slot and publication the endpoint `items` reads (the one slot of its serving generation). */
async function slotOf(url: string): Promise<{ slot: string; publication: string }> {
  const rows = await sql<{ slot: string; publication: string }>(
    url,
    `SELECT s.slot_name AS slot, p.pubname AS publication FROM pg_replication_slots s, pg_publication p
      WHERE s.database = current_database() AND s.active_pid IS NOT NULL`,
  );
  expect(rows).toHaveLength(1);
  return rows[0]!;
}

describe('the replication lag of an endpoint that retries', () => {
  it('defect: while the stream kept failing (its slot read by another process) the lag read null instead of growing', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await itemsDatabase('lagretry');
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startItems(caches, url);
    let holder: ChildProcess | null = null;
    try {
      await streamsWithWrite(pipeline, url, 100);
      const { slot, publication } = await slotOf(url);
      const served = pipeline.status().replication!.committedLsn;
      holder = (await takeReplicationSlot(url, slot, publication)).child;
      // Rows written while the endpoint cannot read its slot: what it serves falls behind, and says so.
      await sql(url, 'INSERT INTO items SELECT g, g FROM generate_series(1000, 1999) g');
      const written = await currentLsn(url);
      const behind = await waitFor(
        async () => {
          const s = pipeline.status();
          const r = s.replication;
          return s.retry !== null && r?.lagBytes && r.lagBytes > 0 && r.observedAt != null ? s : null;
        },
        {
          timeoutMs: 30_000,
          intervalMs: 20,
          what: `the lag to show while it retries (${JSON.stringify(pipeline.status().replication)})`,
        },
      );
      expect(behind.replication).toMatchObject({ slot, committedLsn: served });
      // PostgreSQL answers: the WAL written since is counted, measured moments ago.
      const bytes = (
        await sql<{ n: string }>(url, 'SELECT ($1::pg_lsn - $2::pg_lsn)::text AS n', [written, served])
      )[0]!.n;
      const grown = await waitFor(
        () => {
          const r = pipeline.status().replication;
          return pipeline.status().retry !== null && r && r.lagBytes! >= Number(bytes) ? r : null;
        },
        { timeoutMs: 20_000, intervalMs: 20, what: `the lag to reach ${bytes} bytes while it retries` },
      );
      expect(grown.lagSeconds).toBeGreaterThan(0);
      expect(Date.now() - Date.parse(grown.observedAt!)).toBeLessThan(10_000);
      // Each run starts, waits for the slot in vain and fails before it read anything: not a recovery, so the failed
      // attempts go on counting (and the back-off climbing) rather than starting over at every start.
      await waitFor(() => (pipeline.status().retry?.attempts ?? 0) >= 3, {
        timeoutMs: 30_000,
        what: `three failed attempts in a row (${JSON.stringify(pipeline.status().retry)})`,
      });

      // The slot given back: it streams again and catches up; the figures are live again.
      holder.kill('SIGTERM');
      holder = null;
      await streamsWithWrite(pipeline, url, 2000);
      expect(pipeline.status().replication?.observedAt).toBeNull();
    } finally {
      holder?.kill('SIGKILL');
      await pipeline.stop();
      await caches.close();
    }
  });

  it('defect: while PostgreSQL was down the lag read null instead of the last figures measured, with when', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await itemsDatabase('lagdown');
    const caches = await openCacheManager(join(dir.path, 'data'));
    const pipeline = await startItems(caches, url);
    try {
      await streamsWithWrite(pipeline, url, 100);
      const served = pipeline.status().replication!.committedLsn;
      const stoppedAt = Date.now();
      await server.handle.stop('fast');
      try {
        // Retrying past a failed re-plan (the run's source closed): what it knew of the lag is still shown.
        const down = await waitFor(
          () => {
            const s = pipeline.status();
            return s.retry !== null && s.retry.attempts >= 2 ? s : null;
          },
          { timeoutMs: 30_000, intervalMs: 20, what: 'two failed attempts' },
        );
        expect(down.replication).toMatchObject({ committedLsn: served, lagBytes: expect.any(Number) });
        const observedAt = Date.parse(down.replication!.observedAt!);
        expect(observedAt).toBeLessThanOrEqual(stoppedAt + 5_000);
        // Nothing measured while it is down: the same figures, older.
        const later = await waitFor(
          () => {
            const s = pipeline.status();
            return s.retry !== null && s.retry.attempts >= 3 ? s : null;
          },
          { timeoutMs: 30_000, intervalMs: 20, what: 'a third failed attempt' },
        );
        expect(later.replication).toMatchObject({
          committedLsn: served,
          lagBytes: down.replication!.lagBytes,
          observedAt: down.replication!.observedAt,
        });
      } finally {
        await server.handle.start();
      }
      await streamsWithWrite(pipeline, url, 101);
      expect(pipeline.status().replication?.observedAt).toBeNull();
    } finally {
      await pipeline.stop();
      await caches.close();
    }
  });
});

describe('what an endpoint whose slot another process streams says of its run', () => {
  it('defect: a run resumed while another process streamed its slot said it streamed (progress streaming, no retry) before it had even asked for the slot', {
    timeout: 120_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await itemsDatabase('slotsays');
    const caches = await openCacheManager(join(dir.path, 'data'));
    // The status as it reads at the very moment each run reports that it streams (the report follows its resumed
    // stream's `snapshot-done` synchronously): a poll would see that moment only when it happens to fall on it.
    const said: EndpointPipelineStatus[] = [];
    let watching = false;
    let pipeline: EndpointPipeline | null = null;
    pipeline = await startItems(caches, url, false, {
      onProgress: (progress) => {
        if (watching && progress.phase === 'streaming' && pipeline !== null) said.push(pipeline.status());
      },
    });
    let holder: ChildProcess | null = null;
    try {
      await streamsWithWrite(pipeline, url, 100);
      const { slot, publication } = await slotOf(url);
      holder = (await takeReplicationSlot(url, slot, publication)).child;
      // The run that streamed has failed (its walsender ended): every run from here on resumes while pg_recvlogical
      // streams the slot, so none of them can stream it.
      await waitFor(() => pipeline.status().retry?.nextAttemptAt, {
        timeoutMs: 30_000,
        what: 'the endpoint to retry its run',
      });
      watching = true;
      const attempts = pipeline.status().retry!.attempts;
      await waitFor(() => (pipeline.status().retry?.attempts ?? 0) >= attempts + 2, {
        timeoutMs: 30_000,
        what: `two more failed attempts (${JSON.stringify(pipeline.status().retry)})`,
      });
      watching = false;
      expect(said.length).toBeGreaterThanOrEqual(2);
      const streams = said.filter((s) => s.progress.phase === 'streaming' || s.retry === null);
      expect(streams.map((s) => ({ phase: s.progress.phase, retry: s.retry, slotWait: s.slotWait }))).toEqual(
        [],
      );
      // What it says instead: the attempt under way of the retry, after the failure it retries.
      expect(said[0]).toMatchObject({
        progress: { phase: 'starting' },
        retry: { attempts: expect.any(Number), nextAttemptAt: null },
        error: { code: 'SOURCE_FAILED' },
      });

      holder.kill('SIGTERM');
      holder = null;
      await streamsWithWrite(pipeline, url, 200);
      expect(pipeline.status().progress.phase).toBe('streaming');
    } finally {
      holder?.kill('SIGKILL');
      await pipeline.stop();
      await caches.close();
    }
  });
});
