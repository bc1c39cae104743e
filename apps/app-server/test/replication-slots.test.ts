/**
 * Slot hygiene against a real PostgreSQL with `wal_level=logical`: the slot of an endpoint removed from the
 * configuration is dropped on the next start; `sluice-app-server slots list | drop` lists and drops exactly
 * what it is asked to, with stable codes for an unknown, an active and a foreign slot; slots Sluice did not
 * create always survive.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { spawnTs, sql, tempDir, waitFor } from '@sluice/testkit';
import { describe, expect, it } from 'vitest';
import { BIN, call, localNode, type NodeSpec, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { databaseWith, endpointsStreaming, replicatedEndpointsYaml } from './replication-node.js';

const postgres = logicalPostgresPerFile();

const slotNames = async (url: string) =>
  (
    await sql<{ slot_name: string }>(
      url,
      'SELECT slot_name FROM pg_replication_slots WHERE database = current_database() ORDER BY slot_name',
    )
  ).map((r) => r.slot_name);
const publications = async (url: string) =>
  (await sql<{ pubname: string }>(url, 'SELECT pubname FROM pg_publication ORDER BY pubname')).map(
    (r) => r.pubname,
  );

/** The two source tables of these tests. */
const TABLES =
  'CREATE TABLE items (id int PRIMARY KEY, v int); CREATE TABLE other (id int PRIMARY KEY, v int)';

/** Endpoints `names`, each over the table of its name `(id int PRIMARY KEY, v int)`. */
const endpointYaml = (url: string, names: string[]) =>
  replicatedEndpointsYaml(
    url,
    names.map((name) => ({ name, fields: '{ id: integer, v: integer }' })),
  );

/** Runs `sluice-app-server <args> --config <file>` to its end. */
async function cli(configFile: string, args: string[]) {
  await using child = spawnTs(BIN, [...args, '--config', configFile]);
  const exit = await child.exited;
  const out = child.output();
  return {
    code: exit.code,
    out,
    json: () => {
      try {
        return JSON.parse(out.slice(out.indexOf('{'), out.lastIndexOf('}') + 1));
      } catch {
        throw new Error(`not JSON (exit ${exit.code}):\n${out}`);
      }
    },
  };
}

describe('replication slot hygiene', () => {
  it('drops the slot of an endpoint removed from the configuration on start-up, and nothing else', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-slots-');
    const url = await databaseWith(
      postgres(),
      'slots',
      TABLES,
      'INSERT INTO items SELECT g, g FROM generate_series(1, 20) g',
      'INSERT INTO other SELECT g, g FROM generate_series(1, 5) g',
      // Not Sluice's: another tool's slot, and one that merely looks like Sluice's name (no Sluice publication).
      "SELECT pg_create_logical_replication_slot('debezium', 'pgoutput')",
      "SELECT pg_create_logical_replication_slot('sluice_h1_lookalike_source', 'pgoutput')",
    );
    const spec: NodeSpec = {
      ...localNode('h1', dir.path),
      extraYaml: endpointYaml(url, ['items', 'other']),
    };
    {
      await using node = await startNodeProcess(spec);
      await endpointsStreaming(node, ['items', 'other']);
      expect(await slotNames(url)).toEqual([
        'debezium',
        'sluice_h1_items_source',
        'sluice_h1_lookalike_source',
        'sluice_h1_other_source',
      ]);
      expect(await node.child.stop('SIGTERM', 20_000)).toMatchObject({ code: 0 });
    }

    // The next start has no "other" endpoint: its slot and publication go, and the log says so.
    await using node = await startNodeProcess({ ...spec, extraYaml: endpointYaml(url, ['items']) });
    const line = await node.child.waitForLine(/removed from the configuration/, 30_000);
    expect(JSON.parse(line)).toMatchObject({
      slot: 'sluice_h1_other_source',
      publication: 'sluice_h1_other_source',
      endpoint: 'other',
    });
    await endpointsStreaming(node, ['items']);
    expect(await slotNames(url)).toEqual([
      'debezium',
      'sluice_h1_items_source',
      'sluice_h1_lookalike_source',
    ]);
    expect(await publications(url)).toEqual(['sluice_h1_items_source']);
    // The remaining endpoint still mirrors the table.
    await sql(url, 'UPDATE items SET v = 100 WHERE id = 1');
    await waitFor(async () => (await call(`${node.url}/v1/endpoints`)).body.endpoints[0].records === 20, {
      what: 'items to keep serving',
    });
  });

  it('slots list and slots drop: exactly the named slot, stable codes for unknown, active and foreign slots', {
    timeout: 180_000,
  }, async () => {
    await using dir = await tempDir('sluice-app-slots-cli-');
    const url = await databaseWith(
      postgres(),
      'slotscli',
      TABLES,
      "SELECT pg_create_logical_replication_slot('debezium_2', 'pgoutput')",
    );
    const spec: NodeSpec = {
      ...localNode('h2', dir.path),
      extraYaml: endpointYaml(url, ['items', 'other']),
    };
    const configFile = join(spec.dir, 'sluice.yaml');
    {
      await using node = await startNodeProcess(spec);
      await endpointsStreaming(node, ['items', 'other']);

      const listed = await cli(configFile, ['slots', 'list', '--json']);
      expect(listed.code).toBe(0);
      const rows = listed.json().slots as Array<Record<string, unknown>>;
      expect(rows.map((r) => [r.slot, r.use, r.endpoint, r.active])).toEqual([
        ['debezium_2', 'foreign', null, false],
        ['sluice_h2_items_source', 'in-use', 'items', true],
        ['sluice_h2_other_source', 'in-use', 'other', true],
      ]);

      // Streaming right now: refused, nothing changes.
      const active = await cli(configFile, ['slots', 'drop', 'sluice_h2_items_source']);
      expect(active.code).toBe(1);
      expect(active.out).toContain('SLOT_ACTIVE');
      expect(await slotNames(url)).toContain('sluice_h2_items_source');
      expect(await node.child.stop('SIGTERM', 20_000)).toMatchObject({ code: 0 });
    }
    // The walsender of the stopped node lets go of its slots within moments.
    await waitFor(
      async () =>
        (
          await sql<{ n: string }>(
            url,
            'SELECT count(*) AS n FROM pg_replication_slots WHERE active AND database = current_database()',
          )
        )[0]!.n === '0',
      { what: 'the slots to be released' },
    );

    const unknown = await cli(configFile, ['slots', 'drop', 'sluice_h2_nothing_source']);
    expect(unknown.code).toBe(1);
    expect(unknown.out).toContain('UNKNOWN_SLOT');
    const foreign = await cli(configFile, ['slots', 'drop', 'debezium_2']);
    expect(foreign.code).toBe(1);
    expect(foreign.out).toContain('SLOT_NOT_OWNED');
    const usage = await cli(configFile, ['slots', 'drop']);
    expect(usage.code).toBe(2);
    expect(await slotNames(url)).toEqual(['debezium_2', 'sluice_h2_items_source', 'sluice_h2_other_source']);

    const byName = await cli(configFile, ['slots', 'drop', 'sluice_h2_other_source', '--json']);
    expect(byName.code).toBe(0);
    expect(byName.json().dropped).toEqual([
      {
        connection: 'db',
        slot: 'sluice_h2_other_source',
        publication: 'sluice_h2_other_source',
        endpoint: 'other',
      },
    ]);
    expect(await slotNames(url)).toEqual(['debezium_2', 'sluice_h2_items_source']);
    expect(await publications(url)).toEqual(['sluice_h2_items_source']);

    // An endpoint removed from the file while the node is down: --orphaned finds it, --endpoint names it.
    const text = await readFile(configFile, 'utf8');
    await writeFile(configFile, text.replace(endpointYaml(url, ['items', 'other']), endpointYaml(url, [])));
    const listedAfter = (await cli(configFile, ['slots', 'list', '--json'])).json().slots as Array<
      Record<string, unknown>
    >;
    expect(listedAfter.map((r) => [r.slot, r.use, r.endpoint])).toEqual([
      ['debezium_2', 'foreign', null],
      ['sluice_h2_items_source', 'orphaned', 'items'],
    ]);
    const byEndpoint = await cli(configFile, ['slots', 'drop', '--endpoint', 'items', '--json']);
    expect(byEndpoint.code).toBe(0);
    expect(byEndpoint.json().dropped.map((d: { slot: string }) => d.slot)).toEqual([
      'sluice_h2_items_source',
    ]);
    const none = await cli(configFile, ['slots', 'drop', '--orphaned', '--json']);
    expect(none.json().dropped).toEqual([]);
    expect(await slotNames(url)).toEqual(['debezium_2']);
    expect(await publications(url)).toEqual([]);
  });
});
