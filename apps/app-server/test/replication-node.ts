/**
 * The fixtures of the app-server's logical-replication process tests, defined once so that those tests differ only
 * in what they test: a source table in a database of the file's private PostgreSQL, the YAML of an endpoint over
 * it, what `GET /v1/endpoints` says of that endpoint, and an app-server (and its host's api-server) serving it. The
 * writer committing to `items` in the background is `startItemsWriter` of @sluice/testkit, shared with pipeline's tests.
 *
 * @example
 * ```ts
 * const url = await itemsTable(postgres(), 'lag');
 * await using node = await startNodeProcess({ ...localNode('h1', dir.path), extraYaml: replicatedEndpointYaml(url) });
 * await itemsStreaming(node, { records: 100 });
 * ```
 */
import { type ChildHandle, type LogicalPostgresHandle, sql, waitFor } from '@sluice/testkit';
import { call, type NodeProcess, type NodeSpec, startHostApiServer, startNodeProcess } from './helpers.js';

/** A retry as `GET /v1/endpoints` shows one: failed attempts in a row, and when the next is due. */
export interface RetryView {
  attempts: number;
  nextAttemptAt: string | null;
}

/** An endpoint as `GET /v1/endpoints` reports it (the members these tests read). */
export interface EndpointView {
  name: string;
  phase: string;
  servingCache: string | null;
  buildingCache: string | null;
  records: number | null;
  error: { code: string; message: string } | null;
  retry: RetryView | null;
  decision: { decision: string; reason: string } | null;
  held: { cache: string; reason: string } | null;
  follower: {
    cache: string;
    phase: string;
    reason: string | null;
    error: { code: string; message: string } | null;
    retry: RetryView | null;
    recordsWritten: number;
    lastCommit: { lsn: string; at: string } | null;
  } | null;
  replication: {
    slot: string;
    committedLsn: string | null;
    lagBytes: number | null;
    lagSeconds: number | null;
    following: { cache: string; committedLsn: string | null; lagBytes: number | null } | null;
  } | null;
}

/**
 * Endpoint `name` as `GET /v1/endpoints` on `node` reports it now. Typed as listed, though an endpoint the node does
 * not list yet comes back `undefined` (what a `waitFor` condition reads as "not yet").
 */
export const endpointOf = async (node: Pick<NodeProcess, 'url'>, name = 'items'): Promise<EndpointView> =>
  (await call(`${node.url}/v1/endpoints`)).body.endpoints.find((e: { name: string }) => e.name === name);

/** `items` as `GET /v1/endpoints` on `node` reports it now. */
export const itemsOf = (node: Pick<NodeProcess, 'url'>): Promise<EndpointView> => endpointOf(node, 'items');

/** The generations of `items` on `node` as `[name, state]` pairs, sorted: compared with an expected set in any order. */
export async function generationStates(node: Pick<NodeProcess, 'url'>): Promise<string[][]> {
  const { generations } = (await call(`${node.url}/v1/endpoints/items/generations`)).body as {
    generations: Array<{ name: string; state: string }>;
  };
  return generations.map((g) => [g.name, g.state]).sort();
}

/** True when `lsn` is at or past `target` (PostgreSQL compares them). */
export const lsnReached = async (url: string, lsn: string, target: string) =>
  (await sql<{ ok: boolean }>(url, 'SELECT $1::pg_lsn >= $2::pg_lsn AS ok', [lsn, target]))[0]!.ok;

/**
 * A new database `database` of `postgres` with `statements` run in it in order (its tables and their rows), for a
 * test whose table is not the usual `items` of {@link itemsTable}; resolves with its URL.
 */
export async function databaseWith(
  postgres: LogicalPostgresHandle,
  database: string,
  ...statements: string[]
): Promise<string> {
  const url = await postgres.createDatabase(database);
  for (const statement of statements) await sql(url, statement);
  return url;
}

/**
 * The usual source table `items (id, v, s)` in a new database `database`: rows 1..`rows` with `v` = `id` and `s` the
 * SQL expression `text` of `g` (the id) — `repeat('x', 300)` where the snapshot must take a while. Resolves with
 * the database's URL.
 */
export function itemsTable(
  postgres: LogicalPostgresHandle,
  database: string,
  { rows = 100, text = "'x' || g" }: { rows?: number; text?: string } = {},
): Promise<string> {
  return databaseWith(
    postgres,
    database,
    'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, s text)',
    `INSERT INTO items SELECT g, g, ${text} FROM generate_series(1, ${rows}) g`,
  );
}

/** The fields of endpoint `items` over {@link itemsTable}. */
export const ITEMS_FIELDS = '{ id: integer, v: integer, s: string }';

/** One endpoint of {@link replicatedEndpointsYaml}, reading a table of connection `db`; each has the default said. */
export interface ReplicatedEndpointSpec {
  /** The endpoint's name: `items`. */
  name?: string;
  /** Its source table: the endpoint's name. */
  table?: string;
  /** The source's `key` (a YAML flow sequence), for a table whose replica identity is not a primary key: none. */
  sourceKey?: string;
  /** The primary key column: `id`. */
  primaryKey?: string;
  /** Its `fields`, a YAML flow mapping: {@link ITEMS_FIELDS}; `null` writes none (typed from the table's columns). */
  fields?: string | null;
  /** Its `select`, a YAML flow sequence of the columns it keeps: none, every column. */
  select?: string;
  /** Its `indexes`, a YAML flow sequence: none. */
  indexes?: string;
  /** Its `switch` settings, a YAML flow mapping (`{ mode: manual }`): none, the product's. */
  switch?: string;
}

/** What {@link replicatedEndpointsYaml} writes besides the endpoints; each has the default said. */
export interface ReplicationHostOptions {
  /** The port of the host's api-server (reads wait up to 5 s for a `sluice-min-position`): none, no api-server. */
  apiPort?: number;
  /** Replaced generations kept an hour (`cache.gcGraceMs`), so a rollback always finds its target: not kept. */
  keepGenerations?: boolean;
}

/** What {@link replicatedEndpointYaml} writes: its one endpoint and the host's settings. */
export interface ReplicatedEndpointOptions extends ReplicatedEndpointSpec, ReplicationHostOptions {}

/**
 * The YAML (`extraYaml` of a node) of one endpoint reading the table of the same name at `url` by logical
 * replication: by default `items` over {@link itemsTable}.
 *
 * @example
 * ```ts
 * replicatedEndpointYaml(url, { apiPort, keepGenerations: true, switch: '{ mode: manual }' });
 * ```
 */
export function replicatedEndpointYaml(url: string, options: ReplicatedEndpointOptions = {}): string {
  return replicatedEndpointsYaml(url, [options], options);
}

/**
 * The YAML (`extraYaml` of a node) of `endpoints` reading tables at `url` (connection `db`) by logical replication
 * — `endpoints: []` for none.
 *
 * @example
 * ```ts
 * replicatedEndpointsYaml(url, [{ fields: null }, { name: 'picked', table: 'items', fields: null, select: '[id, v]' }]);
 * ```
 */
export function replicatedEndpointsYaml(
  url: string,
  endpoints: readonly ReplicatedEndpointSpec[],
  host: ReplicationHostOptions = {},
): string {
  return [
    'connections:',
    `  db: { type: postgres, url: "${url}" }`,
    host.apiPort === undefined ? '' : `api: { port: ${host.apiPort}, freshnessWaitMs: 5000 }`,
    host.keepGenerations === true ? 'cache: { gcGraceMs: 3600000 }' : '',
    endpoints.length === 0 ? 'endpoints: []' : 'endpoints:',
    ...endpoints.flatMap(endpointYamlLines),
  ]
    .filter((line) => line !== '')
    .join('\n');
}

/** The lines of one endpoint in the `endpoints:` sequence; empty ones stand for settings left out. */
function endpointYamlLines(endpoint: ReplicatedEndpointSpec): string[] {
  const name = endpoint.name ?? 'items';
  const key = endpoint.sourceKey === undefined ? '' : `, key: ${endpoint.sourceKey}`;
  const fields = endpoint.fields === undefined ? ITEMS_FIELDS : endpoint.fields;
  return [
    `  - name: ${name}`,
    `    source: { type: postgres, connection: db, table: ${endpoint.table ?? name}${key} }`,
    `    primaryKey: [${endpoint.primaryKey ?? 'id'}]`,
    fields === null ? '' : `    fields: ${fields}`,
    endpoint.select === undefined ? '' : `    select: ${endpoint.select}`,
    endpoint.indexes === undefined ? '' : `    indexes: ${endpoint.indexes}`,
    endpoint.switch === undefined ? '' : `    switch: ${endpoint.switch}`,
  ];
}

/**
 * Waits until `items` on `node` serves — `records` records when given — and has committed a replication position:
 * its snapshot is done and it streams. Resolves with what `GET /v1/endpoints` then said.
 */
export function itemsStreaming(
  node: Pick<NodeProcess, 'url'>,
  { records, timeoutMs = 60_000 }: { records?: number; timeoutMs?: number } = {},
): Promise<EndpointView> {
  return waitFor(
    async () => {
      const items = await itemsOf(node);
      return items?.servingCache &&
        (records === undefined || items.records === records) &&
        items.replication?.committedLsn
        ? items
        : null;
    },
    { timeoutMs, intervalMs: 200, what: 'items to stream' },
  );
}

/**
 * Waits until every endpoint of `names` on `node` serves and has committed a replication position (each streams).
 * Resolves with what `GET /v1/endpoints` then said of them, by name.
 */
export function endpointsStreaming(
  node: Pick<NodeProcess, 'url'>,
  names: readonly string[],
  { timeoutMs = 60_000 }: { timeoutMs?: number } = {},
): Promise<Map<string, EndpointView>> {
  return waitFor(
    async () => {
      const listed = (await call(`${node.url}/v1/endpoints`)).body.endpoints as EndpointView[];
      const streaming = listed.filter(
        (e) => names.includes(e.name) && e.servingCache && e.replication?.committedLsn,
      );
      return streaming.length === names.length ? new Map(streaming.map((e) => [e.name, e])) : null;
    },
    { timeoutMs, intervalMs: 200, what: `endpoints ${names.join(', ')} to stream` },
  );
}

/** An app-server streaming `items` and its host's api-server answering for it; dispose stops both. */
export interface ItemsHost extends AsyncDisposable {
  readonly node: NodeProcess;
  readonly apiServer: ChildHandle;
  /** The api-server's base URL. */
  readonly api: string;
  /** What `GET /v1/endpoints` said of `items` once it streamed. */
  readonly streaming: EndpointView;
}

/**
 * Starts the app-server of `spec` (whose YAML names the api-server's port `apiPort`), waits for `items` to stream
 * `records` records, then starts the host's api-server and waits until it answers for `items` — it finds the alias
 * in the LMDB files the app-server wrote, so only after the first snapshot.
 */
export async function startItemsHost(
  spec: NodeSpec,
  { apiPort, records, timeoutMs }: { apiPort: number; records: number; timeoutMs?: number },
): Promise<ItemsHost> {
  const node = await startNodeProcess(spec);
  try {
    const streaming = await itemsStreaming(node, { records, timeoutMs });
    const api = `http://127.0.0.1:${apiPort}`;
    const apiServer = await startHostApiServer(node);
    try {
      await waitFor(async () => (await call(`${api}/v1/endpoints/items`)).status === 200, {
        timeoutMs: 60_000,
        what: 'the api-server to serve items',
      });
    } catch (err) {
      await apiServer[Symbol.asyncDispose]();
      throw err;
    }
    return {
      node,
      apiServer,
      api,
      streaming,
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
