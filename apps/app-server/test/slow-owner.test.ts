/**
 * An owner that is alive but slow: its store round trips take longer than half a lease (as under heavy CPU load,
 * when 100 concurrent submits of one id took 7.5 s against a 2 s lease), while the store keeps renewing its lease.
 * One real app-server on a fresh PostgreSQL database; a trigger makes the round trips slow.
 */
import { join } from 'node:path';
import { createTestDatabase, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import {
  call,
  exactlyOnce,
  FAST_TRANSFERS,
  fileTransfer,
  startNodeProcess,
  waitForState,
  writeRecords,
} from './helpers.js';

/** More slow heartbeats than the owner used to wait for before giving its queued run up (leases.ts). */
const SLOW_HEARTBEATS = 5;

/**
 * Delays the store's insert of a new transfer and every heartbeat of it by `delayMs` (a row in `slow_round_trips`),
 * as an overloaded owner's event loop delays its statements: each is evaluated late, so the lease it writes runs from
 * when the store got it (the owner's own clock counts it from when it sent the statement). Counts the slowed
 * heartbeats and notes, per heartbeat, how much of the lease the store still held when it got it.
 */
const SLOW_ROUND_TRIPS = `
  CREATE TABLE slow_round_trips (delay_ms integer NOT NULL);
  INSERT INTO slow_round_trips VALUES (${Math.round(FAST_TRANSFERS.leaseMs * 0.6)});
  CREATE TABLE renewals (lease_left_ms bigint NOT NULL, slowed boolean NOT NULL);
  CREATE FUNCTION slow_round_trip() RETURNS trigger LANGUAGE plpgsql AS $$
  DECLARE
    delay integer := (SELECT delay_ms FROM slow_round_trips);
    now_ms bigint;
  BEGIN
    -- A heartbeat is the one update that extends the lease and changes nothing else (not even updated_at).
    IF TG_OP = 'UPDATE' AND (NEW.updated_at <> OLD.updated_at OR NEW.lease_expires_at IS NOT DISTINCT FROM OLD.lease_expires_at) THEN
      RETURN NEW;
    END IF;
    PERFORM pg_sleep(delay / 1000.0);
    now_ms := (floor(extract(epoch FROM clock_timestamp()) * 1000))::bigint;
    IF TG_OP = 'UPDATE' THEN INSERT INTO renewals VALUES (OLD.lease_expires_at - now_ms, delay > 0); END IF;
    NEW.lease_expires_at := now_ms + ${FAST_TRANSFERS.leaseMs};
    RETURN NEW;
  END $$;
  CREATE TRIGGER slow_round_trip BEFORE INSERT OR UPDATE ON transfers FOR EACH ROW EXECUTE FUNCTION slow_round_trip();
`;

describe('a live owner with slow store round trips', { timeout: 90_000 }, () => {
  it('defect: a live owner whose store round trips took over half a lease gave its new transfer up before running it — claimed again while the store still held its lease (attempts 2)', async () => {
    await using db = await createTestDatabase('sluice_slow_owner');
    await using dir = await tempDir('sluice-slow-owner-');
    await using node = await startNodeProcess({
      nodeId: 'n1',
      dir: join(dir.path, 'n1'),
      store: db.url,
      roots: [join(dir.path, 'files')],
    });
    await sql(db.url, SLOW_ROUND_TRIPS);
    const source = await writeRecords(join(dir.path, 'files', 'in.jsonl'), 1_000);
    const destination = join(dir.path, 'files', 'out.jsonl');
    const created = await call(`${node.url}/v1/transfers`, {
      json: fileTransfer('slow-1', source, destination, 1_000),
    });
    expect(created.status).toBe(201);
    // The insert left under half a lease by the owner's clock, and so does every heartbeat: the queued run waits
    // for a heartbeat to confirm its lease. Once more heartbeats than it used to wait for went by, the load lifts.
    await waitFor(
      async () => {
        const [row] = await sql<{ n: string }>(db.url, 'SELECT count(*) AS n FROM renewals WHERE slowed');
        return Number(row?.n) >= SLOW_HEARTBEATS;
      },
      { timeoutMs: 30_000, intervalMs: 100, what: `${SLOW_HEARTBEATS} slow heartbeats` },
    );
    await sql(db.url, 'UPDATE slow_round_trips SET delay_ms = 0');
    const done = await waitForState(node.url, 'slow-1', 'COMPLETED');
    // The owner was alive and the store renewed its lease every time: it never lapsed.
    const [lapsed] = await sql<{ n: string }>(
      db.url,
      'SELECT count(*) AS n FROM renewals WHERE lease_left_ms <= 0',
    );
    expect(Number(lapsed?.n)).toBe(0);
    expect({ attempts: done.attempts, epoch: done.epoch, owner: done.owner.nodeId }).toEqual({
      attempts: 1,
      epoch: 1,
      owner: 'n1',
    });
    expect(done.result).toMatchObject({ recordsRead: 1_000, recordsWritten: 1_000 });
    expect(await exactlyOnce(destination, 1_000)).toBeNull();
  });
});
