/**
 * What a replication source follows besides the rows: the table's replica identity must cover the key the records
 * are keyed by (else updates and deletes cannot name the record), and the table itself — its relation OID — is part
 * of what a generation follows (a table dropped and recreated is a different table: a new generation).
 */
import { join } from 'node:path';
import { openCacheManager } from '@sluice/cache';
import { type EndpointConfig, SluiceError } from '@sluice/core';
import { sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { allRecords } from '../../test/helpers.js';
import { replicationContext, useLogicalPostgres } from '../../test/replication.js';
import { startEndpointPipeline } from '../endpoint.js';
import { createReplicationSource } from './replication/source.js';

const server = useLogicalPostgres();

async function start(root: string, url: string, config: EndpointConfig) {
  const caches = await openCacheManager(root);
  try {
    const pipeline = await startEndpointPipeline(config, replicationContext(caches, url));
    return {
      caches,
      pipeline,
      async [Symbol.asyncDispose]() {
        await pipeline.stop();
        await caches.close();
      },
    };
  } catch (err) {
    await caches.close();
    throw err;
  }
}

/** The start-up outcome: `started`, or `<code>: <message>` of the error it stopped with. */
async function startOutcome(root: string, url: string, config: EndpointConfig): Promise<string> {
  try {
    await using started = await start(root, url, config);
    await started.pipeline.whenServing({ timeoutMs: 30_000 });
    return 'started';
  } catch (err) {
    expect(SluiceError.isInstance(err)).toBe(true);
    return `${(err as SluiceError).code}: ${(err as Error).message}`;
  }
}

async function servedRecords(caches: Awaited<ReturnType<typeof start>>['caches'], name: string) {
  const cache = await caches.openRo(name);
  try {
    return allRecords(cache);
  } finally {
    await cache.close();
  }
}

/** An endpoint on `table (a int PRIMARY KEY, b text)`, keyed on `a`. */
const keyedOnA = (table: string): EndpointConfig =>
  ({
    name: table,
    source: { type: 'postgres', connection: 'db', table },
    primaryKey: ['a'],
    fields: { a: 'integer', b: 'string' },
    indexes: [],
  }) as EndpointConfig;

const slots = async (url: string) =>
  (
    await sql<{ slot_name: string }>(
      url,
      'SELECT slot_name FROM pg_replication_slots WHERE database = current_database()',
    )
  ).map((r) => r.slot_name);

describe('replica identity and table identity of a replication source', () => {
  it('defect: an endpoint keyed on columns its replica identity does not cover is refused at start', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('byname');
    await sql(url, 'CREATE TABLE byname (id int PRIMARY KEY, v text UNIQUE NOT NULL, n int)');
    await sql(url, "INSERT INTO byname VALUES (1, 'one', 1), (2, 'two', 2), (3, 'three', 3)");
    const byName = (key?: string[]): EndpointConfig =>
      ({
        name: 'byname',
        source: { type: 'postgres', connection: 'db', table: 'byname', ...(key ? { key } : {}) },
        primaryKey: ['v'],
        fields: { id: 'integer', v: 'string', n: 'integer' },
        indexes: [],
      }) as EndpointConfig;

    // Keyed on v, identity = the primary key (id): a delete names only id, an update of v not the old v.
    for (const key of [undefined, ['v']]) {
      const outcome = await startOutcome(join(dir.path, `data-${key ? 'k' : 'nok'}`), url, byName(key));
      expect(outcome).toMatch(/^REPLICA_IDENTITY_MISSING: /);
      expect(outcome).toContain('"v"');
      expect(outcome).toContain('REPLICA IDENTITY FULL');
      expect(outcome).toContain('"id"');
    }
    // Refused before anything was created.
    expect(await slots(url)).toEqual([]);

    // With an identity that covers v, the same endpoint mirrors deletes and key changes exactly.
    await sql(url, 'ALTER TABLE byname REPLICA IDENTITY FULL');
    await using started = await start(join(dir.path, 'data-full'), url, byName());
    await started.pipeline.whenServing({ timeoutMs: 30_000 });
    await sql(url, "DELETE FROM byname WHERE id = 1; UPDATE byname SET v = 'TWO' WHERE id = 2");
    await waitFor(
      async () => {
        const records = await servedRecords(started.caches, 'byname');
        return JSON.stringify(records.map((r) => r.v).sort()) === JSON.stringify(['TWO', 'three']);
      },
      { timeoutMs: 20_000, what: 'the delete and the key change' },
    );
    expect(started.pipeline.status().badRecords.count).toBe(0);

    // The identity changed under the running endpoint: the next change of the table stops it rather than diverge.
    await sql(url, "ALTER TABLE byname REPLICA IDENTITY DEFAULT; DELETE FROM byname WHERE v = 'three'");
    await waitFor(() => started.pipeline.status().error?.code === 'REPLICA_IDENTITY_MISSING', {
      timeoutMs: 20_000,
      what: `the endpoint to stop on the identity (${JSON.stringify(started.pipeline.status().error)})`,
    });
    expect(started.pipeline.status().badRecords.count).toBe(0);
  });

  it("defect: an endpoint on a table with a DEFERRABLE primary key started, and then the application's UPDATEs and DELETEs of the table failed", {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('deferred');
    // PostgreSQL never uses a deferrable index as the replica identity: once published, the table has none.
    await sql(url, 'CREATE TABLE deferred (a int PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE, b text)');
    await sql(url, "INSERT INTO deferred VALUES (1, 'one'), (2, 'two')");
    const outcome = await startOutcome(join(dir.path, 'data'), url, keyedOnA('deferred'));
    expect(outcome).toMatch(/^REPLICA_IDENTITY_MISSING: /);
    expect(outcome).toContain('DEFERRABLE');
    expect(outcome).toContain('REPLICA IDENTITY FULL');
    // Refused before anything was created, so the application's writes still work.
    expect(await slots(url)).toEqual([]);
    await sql(url, "UPDATE deferred SET b = 'uno' WHERE a = 1; DELETE FROM deferred WHERE a = 2");
    expect(await sql(url, 'SELECT a, b FROM deferred ORDER BY a')).toEqual([{ a: 1, b: 'uno' }]);
  });

  it('defect: REPLICA IDENTITY USING INDEX without `key` says to configure `key` with the index columns', async () => {
    const url = await server.createDatabase('idxid');
    await sql(url, 'CREATE TABLE idxid (a int NOT NULL, b text)');
    await sql(url, 'CREATE UNIQUE INDEX idxid_a ON idxid (a)');
    await sql(url, 'ALTER TABLE idxid REPLICA IDENTITY USING INDEX idxid_a');
    const source = (key?: string[]) =>
      createReplicationSource({
        handle: 'idxid.source',
        url,
        table: 'idxid',
        slot: 'sluice_t1_idxid',
        publication: 'sluice_t1_idxid',
        ...(key ? { key } : {}),
      });
    const refusal = async (key?: string[]) => {
      const s = source(key);
      try {
        await s.preflight!();
        return 'accepted';
      } catch (err) {
        return `${(err as SluiceError).code}: ${(err as Error).message}`;
      } finally {
        await s.close();
      }
    };
    const without = await refusal();
    expect(without).toMatch(/^REPLICA_IDENTITY_MISSING: /);
    expect(without).not.toContain('no replica identity');
    expect(without).toContain('idxid_a');
    expect(without).toMatch(/key.*\["a"\]/);
    expect(await refusal(['a'])).toBe('accepted');
    expect(await refusal(['b'])).toMatch(/^REPLICA_IDENTITY_MISSING: .*"b".*idxid_a/);
  });

  it('defect: a table dropped and recreated is rebuilt from the new table, live and at restart', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    const root = join(dir.path, 'data');
    const url = await server.createDatabase('fullid');
    const create = async (rows: string) => {
      await sql(url, 'CREATE TABLE fullid (a int NOT NULL, b text)');
      await sql(url, 'ALTER TABLE fullid REPLICA IDENTITY FULL');
      await sql(url, `INSERT INTO fullid VALUES ${rows}`);
    };
    await create("(1, 'x'), (2, 'x'), (3, 'x'), (4, 'x')");
    const config = {
      name: 'fullid',
      source: { type: 'postgres', connection: 'db', table: 'fullid', key: ['a'] },
      primaryKey: ['a'],
      fields: { a: 'integer', b: 'string' },
      indexes: [],
    } as EndpointConfig;
    const servedKeys = async (caches: Awaited<ReturnType<typeof start>>['caches']) =>
      (await servedRecords(caches, 'fullid')).map((r) => r.a as number).sort((x, y) => x - y);
    {
      await using started = await start(root, url, config);
      await started.pipeline.whenServing({ timeoutMs: 30_000 });
      expect(await servedKeys(started.caches)).toEqual([1, 2, 3, 4]);

      await sql(url, 'DROP TABLE fullid');
      await create("(100, 'new'), (101, 'new2')");
      await waitFor(async () => JSON.stringify(await servedKeys(started.caches)) === '[100,101]', {
        timeoutMs: 30_000,
        what: `the endpoint to serve the recreated table (status ${JSON.stringify(started.pipeline.status().error)})`,
      });
      // defect: the generation a source change forced was labelled as an operator's rebuild ("rebuild requested",
      // switch cause `rebuild`); it is a schema change.
      const serving = started.caches.resolveAlias('fullid')?.cache;
      const notes = serving === undefined ? undefined : (await started.caches.info(serving))?.notes;
      expect({ cause: notes?.cause, reason: started.pipeline.decision.reason }).toEqual({
        cause: 'schema-change',
        reason: expect.stringMatching(/^the source changed \(.*fullid/),
      });
      await sql(url, "INSERT INTO fullid VALUES (102, 'streamed')");
      await waitFor(async () => (await servedKeys(started.caches)).includes(102), {
        timeoutMs: 20_000,
        what: 'a change of the recreated table to stream',
      });
    }

    // Stopped, then the table is replaced again: the restart must not resume on the old checkpoint.
    await sql(url, 'DROP TABLE fullid');
    await create("(200, 'again')");
    await using restarted = await start(root, url, config);
    expect(restarted.pipeline.decision.decision).toBe('from-scratch');
    expect(restarted.pipeline.decision.reason).toMatch(
      /^the source changed \(.*fullid.*(dropped|recreated|replaced)/,
    );
    await restarted.pipeline.whenServing({ timeoutMs: 30_000 });
    // Found at restart, it is a schema change too (before: cause `restart`).
    const rebuilt = restarted.caches.resolveAlias('fullid')?.cache;
    expect(rebuilt === undefined ? undefined : (await restarted.caches.info(rebuilt))?.notes.cause).toBe(
      'schema-change',
    );
    await waitFor(async () => JSON.stringify(await servedKeys(restarted.caches)) === '[200]', {
      timeoutMs: 30_000,
      what: 'the restarted endpoint to serve the table now there',
    });
  });

  it('defect: a source-change rebuild that could not start at once was retried as a plain restart', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('gapid');
    const create = async (rows: string) => {
      await sql(url, 'CREATE TABLE gapid (a int PRIMARY KEY, b text)');
      await sql(url, `INSERT INTO gapid VALUES ${rows}`);
    };
    await create("(1, 'x'), (2, 'x')");
    await using started = await start(join(dir.path, 'data'), url, keyedOnA('gapid'));
    await started.pipeline.whenServing({ timeoutMs: 30_000 });

    // Dropped, and not yet recreated: the stream stops on the change, and the new generation cannot start yet.
    await sql(url, 'DROP TABLE gapid');
    await waitFor(
      () =>
        started.pipeline.status().error?.code !== 'SOURCE_SCHEMA_CHANGED' &&
        started.pipeline.status().error !== null,
      {
        timeoutMs: 20_000,
        what: `the rebuild to fail for want of the table (${JSON.stringify(started.pipeline.status().error)})`,
      },
    );
    await create("(100, 'new')");
    await waitFor(
      async () => JSON.stringify((await servedRecords(started.caches, 'gapid')).map((r) => r.a)) === '[100]',
      {
        timeoutMs: 30_000,
        what: `the endpoint to serve the recreated table (${JSON.stringify(started.pipeline.status().error)})`,
      },
    );
    const serving = started.caches.resolveAlias('gapid')?.cache;
    const notes = serving === undefined ? undefined : (await started.caches.info(serving))?.notes;
    // Before: cause `restart`, reason "source … cannot resume: table gapid was dropped and recreated …".
    expect({ cause: notes?.cause, reason: started.pipeline.decision.reason }).toEqual({
      cause: 'schema-change',
      reason: expect.stringMatching(/^the source changed \(.*gapid.*dropped/),
    });
  });

  it('defect: a table taken out of its publication was resumed in place, missing its unpublished changes, when the rebuild had to be retried', {
    timeout: 90_000,
  }, async () => {
    await using dir = await tempDir();
    const url = await server.createDatabase('unpub');
    await sql(url, 'CREATE TABLE unpub (a int PRIMARY KEY, b text)');
    await sql(url, "INSERT INTO unpub VALUES (1, 'x'), (2, 'x')");
    await using started = await start(join(dir.path, 'data'), url, keyedOnA('unpub'));
    await started.pipeline.whenServing({ timeoutMs: 30_000 });
    const pubname = (await sql<{ pubname: string }>(url, 'SELECT pubname FROM pg_publication'))[0]!.pubname;

    // Out of the publication, a change the stream never sees, and (a PostgreSQL event trigger) the start-up's
    // publication setup refused for a while — ALTER PUBLICATION … ADD TABLE, or CREATE PUBLICATION for the slot the
    // green reads (docs/generations.md) — so the forced rebuild fails and is retried.
    await sql(
      url,
      `CREATE FUNCTION refuse_publication_change() RETURNS event_trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'publication changes refused for this test'; END $$;
       ALTER PUBLICATION ${pubname} DROP TABLE unpub;
       INSERT INTO unpub VALUES (3, 'unpublished');
       CREATE EVENT TRIGGER refuse_publication ON ddl_command_start WHEN TAG IN ('ALTER PUBLICATION', 'CREATE PUBLICATION')
         EXECUTE FUNCTION refuse_publication_change();`,
    );
    await waitFor(() => /refused for this test/.test(started.pipeline.status().error?.message ?? ''), {
      timeoutMs: 20_000,
      what: `the rebuild to fail on the refused publication change (${JSON.stringify(started.pipeline.status().error)})`,
    });
    await sql(url, 'DROP EVENT TRIGGER refuse_publication');
    // Before: the retry resumed the generation in place, and row 3 was never served (timed out).
    await waitFor(async () => (await servedRecords(started.caches, 'unpub')).some((r) => r.a === 3), {
      timeoutMs: 30_000,
      what: `the row changed while the table was unpublished (${JSON.stringify(started.pipeline.status().error)}, ${started.pipeline.decision.reason})`,
    });
    expect(started.pipeline.decision.reason).toMatch(/^the source changed \(.*publication/);
  });
});
