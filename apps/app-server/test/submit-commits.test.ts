/**
 * What an idempotent transfer costs the store, counted where it lands: a trigger on the store's `transfers`
 * table records the transaction id of every write to a transfer's row.
 */
import { join } from 'node:path';
import { createTestDatabase, tempDir } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { call, fileTransfer, startNodeProcess, waitForState, writeRecords } from './helpers.js';

const AUDIT_DDL = `
CREATE TABLE store_writes (seq bigserial PRIMARY KEY, id text NOT NULL, state text NOT NULL,
  xid bigint NOT NULL DEFAULT txid_current());
CREATE FUNCTION store_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO store_writes (id, state) VALUES (NEW.id, NEW.state);
  RETURN NULL;
END $$;
CREATE TRIGGER store_write AFTER INSERT OR UPDATE ON transfers FOR EACH ROW EXECUTE FUNCTION store_write();`;

describe('store commits of an idempotent transfer (PostgreSQL)', () => {
  it('defect: a new-id submit committed twice before its 201, and a 1-record transfer cost more than three commits', async () => {
    await using db = await createTestDatabase('sluice_app_commits');
    await using dir = await tempDir('sluice-app-commits-');
    await using node = await startNodeProcess({
      nodeId: 'c1',
      dir: join(dir.path, 'c1'),
      store: db.url,
      roots: [dir.path],
      // Long lease: no heartbeat renews it during these short transfers, so every write counted is the transfer's.
      transfers: { leaseMs: 60_000, heartbeatMs: 20_000 },
    });
    const audit = new pg.Client({ connectionString: db.url });
    await audit.connect();
    try {
      await audit.query(AUDIT_DDL);
      const commits = async (id: string) =>
        (
          await audit.query<{ xid: string; states: string }>(
            `SELECT xid::text, string_agg(state, ',' ORDER BY seq) AS states FROM store_writes
              WHERE id = $1 GROUP BY xid ORDER BY min(seq)`,
            [id],
          )
        ).rows;

      // A file destination: the sink publishes (rename) after a fenced confirmation of its epoch.
      const source = await writeRecords(join(dir.path, 'one.jsonl'), 1);
      const body = fileTransfer('one-record', source, join(dir.path, 'one-out.jsonl'));
      const created = await call(`${node.url}/v1/transfers`, { json: body });
      expect(created.status).toBe(201);
      expect(created.body.state).toBe('IN_PROGRESS');
      await waitForState(node.url, 'one-record', 'COMPLETED');
      const written = await commits('one-record');
      // The insert (already IN_PROGRESS), the final checkpoint, COMPLETED.
      expect(written.map((w) => w.states)).toEqual(['IN_PROGRESS', 'IN_PROGRESS', 'COMPLETED']);

      // A duplicate answers from the stored record and writes nothing.
      const again = await call(`${node.url}/v1/transfers`, { json: body });
      expect(again.status).toBe(200);
      expect(again.body.state).toBe('COMPLETED');
      expect(await commits('one-record')).toHaveLength(3);
    } finally {
      await audit.end();
    }
  });
});
