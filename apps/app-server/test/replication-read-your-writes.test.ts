/**
 * Read-your-writes as a user of the PostgreSQL mirror does it (apps/api-server/README.md § Read your writes): an
 * application commits to its tables, asks `SELECT pg_current_wal_insert_lsn()` on the same connection and reads the
 * mirror through the api-server with that position as `sluice-min-position` — every time, right after every write,
 * the answer must hold the write and no transaction in part. Real app-server and api-server processes, a private
 * PostgreSQL with `wal_level=logical`, three tables with the three replica identities (primary key, FULL, USING
 * INDEX), values large enough to be TOASTed and updates that leave them unchanged, multi-statement transactions,
 * transactions over every row, savepoints rolled back, primary keys changed, TRUNCATE, two-phase commits, commits
 * with `synchronous_commit = off`, and WAL ending exactly at a page boundary. A fixed seed; each answer is compared
 * with the table byte for byte.
 */

import { freePort, type SeededRandom, seededRandom, tempDir } from '@sluice/testkit';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { call, localNode, startHostApiServer, startNodeProcess } from './helpers.js';
import { logicalPostgresPerFile } from './logical-postgres.js';
import { databaseWith, endpointsStreaming, replicatedEndpointsYaml } from './replication-node.js';

// The WAL writer flushes an asynchronous commit within 20 ms rather than 200: the same reads, five times as many
// per second of test. Prepared transactions allowed (two-phase commits are among the writes).
const postgres = logicalPostgresPerFile({
  settings: { wal_writer_delay: '20ms', max_prepared_transactions: 4 },
});

/** One row of the three source tables, as PostgreSQL holds it and as the endpoints serve it. */
interface Row {
  id: number;
  v: number;
  big: string | null;
}

/** The three tables, one per replica identity, each mirrored by the endpoint of its name. */
const TABLES = ['plain', 'fullrow', 'byindex'] as const;

const SCHEMA = [
  'CREATE TABLE plain (id int PRIMARY KEY, v int NOT NULL, big text)',
  'CREATE TABLE fullrow (id int PRIMARY KEY, v int NOT NULL, big text)',
  'ALTER TABLE fullrow REPLICA IDENTITY FULL',
  'CREATE TABLE byindex (id int NOT NULL, v int NOT NULL, big text)',
  'CREATE UNIQUE INDEX byindex_id ON byindex (id)',
  'ALTER TABLE byindex REPLICA IDENTITY USING INDEX byindex_id',
];

/**
 * A text of `length` characters PostgreSQL cannot compress much (so one over ~2 kB is stored out of line, TOASTed),
 * from `rng`.
 */
function bigText(rng: SeededRandom, length: number): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 é✓';
  let out = '';
  while (out.length < length) out += alphabet[rng.int(0, alphabet.length - 1)];
  return out;
}

/** A `big` value: TOASTed (6 000 characters) a third of the time, short or NULL otherwise. */
function bigValue(rng: SeededRandom): string | null {
  if (rng.chance(0.33)) return bigText(rng, 6_000);
  return rng.chance(0.5) ? bigText(rng, 12) : null;
}

/**
 * The position to send as `sluice-min-position` after a commit on `client`, as apps/api-server/README.md § Read your
 * writes says to ask for it.
 */
async function positionOfMyWrites(client: pg.Client): Promise<string> {
  return (await client.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0]!
    .lsn;
}

/** Every row of `table`, by id. */
async function tableRows(client: pg.Client, table: string): Promise<Row[]> {
  return (await client.query<Row>(`SELECT id, v, big FROM ${table} ORDER BY id`)).rows;
}

/**
 * Every record endpoint `name` serves at `api` once it has committed `minPosition`, by id — or the first answer
 * other than 200 (its status and code), which the caller's comparison then shows.
 */
async function servedRows(api: string, name: string, minPosition: string): Promise<Row[] | string> {
  const rows: Row[] = [];
  let after: string | null = null;
  do {
    const reply = await call(`${api}/v1/endpoints/${name}/query`, {
      json: { $order_by: { id: 'asc' }, $limit: 500, ...(after === null ? {} : { $after: after }) },
      headers: { 'sluice-min-position': minPosition },
    });
    if (reply.status !== 200) return `${reply.status} ${reply.body?.code}: ${reply.body?.detail ?? ''}`;
    rows.push(...(reply.body.records as Row[]).map(({ id, v, big }) => ({ id, v, big: big ?? null })));
    after = reply.body.next;
  } while (after !== null);
  return rows;
}

/** What one step of the application does: its statements (run in one transaction by the caller) and its name. */
interface Step {
  /** Which of the kinds of write it is (every kind must occur in a run). */
  kind: string;
  what: string;
  statements: Array<[string, unknown[]]>;
}

/**
 * The next step of the application, chosen by `rng` over the ids `ids` holds now (kept up to date here): the same
 * change made to each of the three tables.
 */
function nextStep(rng: SeededRandom, ids: number[], nextId: () => number): Step {
  const each = (text: string, params: unknown[]): Array<[string, unknown[]]> =>
    TABLES.map((table) => [text.replaceAll('$table', table), params]);
  const existing = () => ids[rng.int(0, ids.length - 1)]!;
  const roll = rng.next();
  if (ids.length < 3 || roll < 0.15) {
    const id = nextId();
    ids.push(id);
    return {
      kind: 'insert',
      what: `insert ${id}`,
      statements: each('INSERT INTO $table VALUES ($1, $2, $3)', [id, rng.int(0, 999), bigValue(rng)]),
    };
  }
  if (roll < 0.35) {
    // Leaves `big` as it is: a TOASTed value is then not in the WAL record (pgoutput sends it as "unchanged").
    const id = existing();
    return {
      kind: 'update leaving big',
      what: `update v of ${id}`,
      statements: each('UPDATE $table SET v = v + 1 WHERE id = $1', [id]),
    };
  }
  if (roll < 0.45) {
    const id = existing();
    return {
      kind: 'update big',
      what: `update big of ${id}`,
      statements: each('UPDATE $table SET big = $2 WHERE id = $1', [id, bigValue(rng)]),
    };
  }
  if (roll < 0.55) {
    const id = existing();
    ids.splice(ids.indexOf(id), 1);
    return {
      kind: 'delete',
      what: `delete ${id}`,
      statements: each('DELETE FROM $table WHERE id = $1', [id]),
    };
  }
  if (roll < 0.65) {
    // The key changes and `big` is left as it is.
    const from = existing();
    const to = nextId();
    ids[ids.indexOf(from)] = to;
    return {
      kind: 'key change',
      what: `move ${from} to ${to}`,
      statements: each('UPDATE $table SET id = $2 WHERE id = $1', [from, to]),
    };
  }
  if (roll < 0.8) {
    // Several statements: v moves from one row to another, one row comes, one goes.
    const a = existing();
    const b = existing();
    const gone = existing();
    const added = nextId();
    const statements = [
      ...each('UPDATE $table SET v = v - 7 WHERE id = $1', [a]),
      ...each('UPDATE $table SET v = v + 7 WHERE id = $1', [b]),
      ...each('INSERT INTO $table VALUES ($1, 0, $2)', [added, bigValue(rng)]),
      ...each('DELETE FROM $table WHERE id = $1', [gone]),
    ];
    ids.splice(ids.indexOf(gone), 1);
    ids.push(added);
    return {
      kind: 'several statements',
      what: `move v ${a}→${b}, insert ${added}, delete ${gone}`,
      statements,
    };
  }
  if (roll < 0.88) {
    // Every row, some of them TOASTed and left so.
    return {
      kind: 'every row',
      what: 'update every row',
      statements: each('UPDATE $table SET v = v * 3 % 1000', []),
    };
  }
  if (roll < 0.95) {
    // What a savepoint rolled back did must never show.
    const id = existing();
    const statements: Array<[string, unknown[]]> = [
      ...each('UPDATE $table SET v = 1 WHERE id = $1', [id]),
      ['SAVEPOINT undone', []],
      ...each('UPDATE $table SET v = -1, big = NULL WHERE id = $1', [id]),
      ...each('DELETE FROM $table WHERE id <> $1', [id]),
      ['ROLLBACK TO SAVEPOINT undone', []],
    ];
    return { kind: 'savepoint', what: `savepoint rolled back around ${id}`, statements };
  }
  // TRUNCATE of the three tables in one statement (one message naming them all), and rows again, in one
  // transaction: never seen empty.
  const fresh = [nextId(), nextId(), nextId()];
  ids.splice(0, ids.length, ...fresh);
  return {
    kind: 'truncate',
    what: `truncate, insert ${fresh.join(', ')}`,
    statements: [
      [`TRUNCATE ${TABLES.join(', ')}`, []],
      ...fresh.flatMap((id) =>
        each('INSERT INTO $table VALUES ($1, $2, $3)', [id, id % 1000, bigValue(rng)]),
      ),
    ],
  };
}

/** An app-server mirroring the three tables of {@link SCHEMA} at `url` and its host's api-server; dispose stops both. */
interface Mirror extends AsyncDisposable {
  /** The api-server's base URL. */
  api: string;
}

/** Starts the app-server mirroring {@link TABLES} at `url` (its files under `root`), then its host's api-server. */
async function startMirror(root: string, url: string): Promise<Mirror> {
  const apiPort = await freePort();
  const fields = '{ id: integer, v: integer, big: string }';
  const node = await startNodeProcess({
    ...localNode('h1', root),
    // The product's commit cadence, not the tests' every-50-records.
    pipeline: { commitEveryRecords: 10_000, commitEveryMs: 1_000 },
    extraYaml: replicatedEndpointsYaml(
      url,
      [
        { name: 'plain', fields },
        { name: 'fullrow', fields },
        { name: 'byindex', sourceKey: '[id]', fields },
      ],
      { apiPort },
    ),
  });
  try {
    await endpointsStreaming(node, TABLES);
    const apiServer = await startHostApiServer(node);
    return {
      api: `http://127.0.0.1:${apiPort}`,
      async [Symbol.asyncDispose]() {
        await apiServer[Symbol.asyncDispose]();
        await node[Symbol.asyncDispose]();
      },
    };
  } catch (err) {
    await node[Symbol.asyncDispose]();
    throw err;
  }
}

/** PostgreSQL's insert location on `client`, as a number. */
async function insertLocation(client: pg.Client): Promise<bigint> {
  const { rows } = await client.query<{ at: string }>(
    "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text AS at",
  );
  return BigInt(rows[0]!.at);
}

/**
 * Writes WAL on `client` until its last record ends exactly at a page boundary (8 kB pages), so that the insert
 * location is past the next page's header; resolves with that boundary. Non-transactional logical messages, which no
 * endpoint streams, sized from what one of them is seen to take.
 */
async function endWalAtPageBoundary(client: pg.Client): Promise<bigint> {
  const emit = (length: number) =>
    client.query("SELECT pg_logical_emit_message(false, 'p', repeat('x', $1))", [length]);
  for (let attempt = 0; attempt < 20; attempt++) {
    const before = await insertLocation(client);
    await emit(300);
    const after = await insertLocation(client);
    const page = after - (after % 8192n);
    // What a message takes besides its text (its record rounded up to 8 bytes), when it did not cross a page.
    const overhead = after - before - 300n;
    const remaining = page + 8192n - after;
    if (before < page || remaining < overhead + 300n) continue;
    await emit(Number(remaining - overhead));
    const now = await insertLocation(client);
    // Past the header of the page that starts where the message ended (24 bytes, 40 at a segment's start).
    if (now === page + 8192n + 24n || now === page + 8192n + 40n) return page + 8192n;
  }
  throw new Error('could not end the WAL at a page boundary (something else writes WAL?)');
}

describe('read-your-writes through the api-server, as the README tells an application to do it', () => {
  it('defect: a write whose last WAL record ended at a page boundary was answered 503 POSITION_NOT_REACHED: its insert location is past the next page header, which the walsender never reports', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir('sluice-ryw-page-');
    const url = await databaseWith(
      postgres(),
      'ryw_page',
      ...SCHEMA,
      "INSERT INTO plain VALUES (1, 1, 'one')",
    );
    await using mirror = await startMirror(dir.path, url);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      for (let i = 0; i < 3; i++) {
        await client.query('UPDATE plain SET v = v + 1 WHERE id = 1');
        const boundary = await endWalAtPageBoundary(client);
        const position = await positionOfMyWrites(client);
        const reply = await call(`${mirror.api}/v1/endpoints/plain/records/1`, {
          headers: { 'sluice-min-position': position },
        });
        const answer = reply.status === 200 ? reply.body : reply.body.detail;
        expect({ boundary: boundary.toString(16), position, status: reply.status, answer }).toEqual({
          boundary: boundary.toString(16),
          position,
          status: 200,
          answer: { id: 1, v: 2 + i, big: 'one' },
        });
      }
    } finally {
      await client.end();
    }
  });

  it('defect: 200 writes of every kind, each read back at once with sluice-min-position as documented: a write committed with synchronous_commit = off was answered without it (pg_current_wal_lsn() is where WAL is written, not inserted)', {
    timeout: 60_000,
  }, async () => {
    await using dir = await tempDir('sluice-ryw-');
    const rng = seededRandom(16);
    const url = await databaseWith(postgres(), 'ryw', ...SCHEMA);
    let lastId = 0;
    const nextId = () => ++lastId;
    const ids: number[] = [];
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      for (let i = 0; i < 30; i++) {
        const id = nextId();
        ids.push(id);
        const big = bigValue(rng);
        for (const table of TABLES)
          await client.query(`INSERT INTO ${table} VALUES ($1, $2, $3)`, [id, id, big]);
      }
      await using mirror = await startMirror(dir.path, url);
      const { api } = mirror;

      const misses: string[] = [];
      const kinds = new Set<string>();
      for (let i = 0; i < 200 && misses.length < 5; i++) {
        const step = nextStep(rng, ids, nextId);
        kinds.add(step.kind);
        await client.query('BEGIN');
        // An application that can lose its last commits in a crash (PostgreSQL's `synchronous_commit = off`) still
        // reads its own writes back.
        const asynchronous = rng.chance(0.5);
        if (asynchronous) await client.query('SET LOCAL synchronous_commit = off');
        for (const [text, params] of step.statements) await client.query(text, params);
        // Some as a two-phase commit: decoded (and visible) at COMMIT PREPARED, not at PREPARE.
        const prepared = rng.chance(0.1);
        if (prepared) {
          await client.query(`PREPARE TRANSACTION 'ryw-${i}'`);
          await client.query(`COMMIT PREPARED 'ryw-${i}'`);
          kinds.add('two-phase commit');
        } else await client.query('COMMIT');
        const lsn = await positionOfMyWrites(client);
        // The three reads at once, as three clients would; the table read after them (nothing writes meanwhile).
        const answers = await Promise.all(TABLES.map((table) => servedRows(api, table, lsn)));
        for (const [t, table] of TABLES.entries()) {
          const served = answers[t];
          const expected = await tableRows(client, table);
          if (JSON.stringify(served) !== JSON.stringify(expected))
            misses.push(
              `step ${i} (${step.what}${asynchronous ? ', asynchronous commit' : ''}${prepared ? ', two-phase' : ''}) at ${lsn}: ${table} served ${JSON.stringify(served).slice(0, 300)}`,
            );
        }
      }
      expect(misses).toEqual([]);
      expect([...kinds].sort()).toEqual([
        'delete',
        'every row',
        'insert',
        'key change',
        'savepoint',
        'several statements',
        'truncate',
        'two-phase commit',
        'update big',
        'update leaving big',
      ]);
      // And the mirror ends equal to the table, byte for byte (the comparison above, once more, after every write).
      const lsn = await positionOfMyWrites(client);
      for (const table of TABLES)
        expect(await servedRows(api, table, lsn)).toEqual(await tableRows(client, table));
    } finally {
      await client.end();
    }
  });
});
