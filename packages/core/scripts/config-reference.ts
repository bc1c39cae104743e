// Generates docs/configuration.md from the zod config schema, so the reference can never drift from what
// the servers accept. Run: pnpm --filter @sluice/core docs:config
import { writeFileSync } from 'node:fs';
import { z } from 'zod';
import { ENV_OVERRIDES, MOVED_KEYS, SluiceConfigSchema } from '../src/index.ts';

type JsonSchema = {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  enum?: unknown[];
  const?: unknown;
  default?: unknown;
  description?: string;
  required?: string[];
  additionalProperties?: JsonSchema | boolean;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
};

function typeOf(schema: JsonSchema): string {
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(' \\| ');
  const variants = schema.anyOf ?? schema.oneOf;
  if (variants) return variants.map(typeOf).join(' \\| ');
  if (schema.type === 'array') return `${schema.items ? typeOf(schema.items) : 'any'}[]`;
  if (
    schema.type === 'object' &&
    schema.additionalProperties &&
    typeof schema.additionalProperties === 'object' &&
    !schema.properties
  )
    return `map of name → ${typeOf(schema.additionalProperties)}`;
  if (Array.isArray(schema.type)) return schema.type.join(' \\| ');
  return schema.type ?? 'any';
}

function constraints(schema: JsonSchema): string {
  const parts: string[] = [];
  if (schema.minimum !== undefined) parts.push(`≥ ${schema.minimum}`);
  if (schema.maximum !== undefined) parts.push(`≤ ${schema.maximum}`);
  if (schema.minLength !== undefined && schema.minLength > 1) parts.push(`length ≥ ${schema.minLength}`);
  if (schema.maxLength !== undefined) parts.push(`length ≤ ${schema.maxLength}`);
  // An array's bounds are on its items (`control.auth.tokens`: each at least 16 characters); say so, or a value
  // the server refuses at start would look valid here.
  const each = schema.type === 'array' && schema.items ? constraints(schema.items) : '';
  if (each !== '') parts.push(`each ${each}`);
  return parts.join(', ');
}

// Types the JSON Schema export cannot spell out (maps with guarded keys, recursive filters).
const TYPE_OVERRIDES: Record<string, string> = {
  connections: 'map of name → `{type: postgres, url}` \\| `{type: nats, nats}`',
  endpoints: 'endpoint[] (below)',
};

// What a value must look like where the JSON Schema export cannot say it (refinements).
const NOTES: Record<string, string> = {
  store: '`sqlite:<path>` or a `postgres://` / `postgresql://` URL',
  nats: 'a `nats://` or `tls://` URL, or `host:port`; or `{servers, user?, pass?, token?, nkeySeed?, credsFile?, tls?}` (`nkeySeed` or `credsFile`, not both: a creds file carries its own seed)',
  connections:
    'a postgres `url` is a `postgres://` or `postgresql://` URL; `nats` as for the top-level `nats`',
  'node.host': 'an IP address (IPv6 with or without brackets) or a host name; no scheme, no port',
  'api.host': 'an IP address (IPv6 with or without brackets) or a host name; no scheme, no port',
  'api.cors.origins':
    '`true` (any origin) or origins as a browser sends them (`https://app.example`, `http://localhost:3000`: lower case, no default port, no path); the preflight allows `authorization`, `content-type`, `sluice-min-position` and `last-event-id`',
  'control.auth': '`tokens` (at least one) or `jwtSecret`, or both',
  'control.auth.jwtSecret':
    "not `api.auth.jwtSecret`: the control API grants any JWT it verifies, so a shared secret would make every query-API token (a reader's, row filters and all) a control token",
  'files.roots':
    'empty: the working directory; relative roots resolve against it; a root may not exist yet (a transfer writing into it creates it), but one that is a file or below a file stops the app-server at start (`CONFIG_INVALID` naming `files.roots[i]`)',
  'cache.stagedInMemory':
    "changes of one source transaction a cache writer holds in memory; the rest wait in the generation's staging area on disk until the commit (memory stays about this size whatever the transaction's)",
  'api.changes.maxPerClient':
    'default 100, or `api.changes.maxSubscribers` when that is lower; at most `api.changes.maxSubscribers` (a bound above it could never refuse)',
  'control.maxStreamsPerClient':
    'default 16, or `control.maxStreams` when that is lower; at most `control.maxStreams` (a bound above it could never refuse)',
  'http.drainDelayMs':
    "SIGTERM only (SIGINT and SIGHUP stop at once): `/readyz` answers 503 while every request is still served, each answer with `Connection: close`; then the graceful close. Set it to at least the load balancer's check interval times the failures it waits for; 0 for no drain",
  'backplane.strategy':
    '`auto`: `nats` when `nats` is set, else `single` on a SQLite store, else `direct`; the api-servers follow alias events on NATS only when the strategy is (or `auto` picks) `nats`, else they watch the alias table',
};

const rows: string[] = [];
function walk(schema: JsonSchema, path: string): void {
  if (path !== '') {
    const env = Object.entries(ENV_OVERRIDES).find(([, p]) => p === path)?.[0];
    const def = schema.default === undefined ? '' : `\`${JSON.stringify(schema.default)}\``;
    rows.push(
      `| \`${path}\` | ${TYPE_OVERRIDES[path] ?? typeOf(schema)} | ${def} | ${[constraints(schema), env ? `env \`${env}\`` : '', NOTES[path] ?? '', schema.description ?? ''].filter(Boolean).join('; ')} |`,
    );
  }
  if (schema.properties && path.split('.').length < 3) {
    for (const [key, child] of Object.entries(schema.properties))
      walk(child, path === '' ? key : `${path}.${key}`);
  }
}

const json = z.toJSONSchema(SluiceConfigSchema, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
walk(json, '');
const out = [
  '# Configuration reference (`sluice.yaml`)',
  '',
  'Generated from the zod schema in `@sluice/core` (`pnpm --filter @sluice/core docs:config`); do not edit by hand.',
  'The app-server and the api-servers of a host read the same file: `--config <file>`, else `./sluice.yaml` when it',
  'exists, else none; then the `SLUICE_*` environment overrides below. Every key is optional: with no file at all',
  'Sluice runs embedded (SQLite store and LMDB caches under `./.sluice/`, no NATS). Unknown keys are rejected,',
  'and a bad value stops the server at start with the exact path of the field and the reason.',
  '',
  '| key | type | default | notes |',
  '|---|---|---|---|',
  ...rows,
  '',
  '## Endpoints',
  '',
  '`endpoints` is a list of `{ name, source, primaryKey, fields?, indexes?, filter?, select?, switch? }`:',
  '',
  '- `name`: the endpoint and its alias; letters, digits, `.`, `_`, `-`, starting with a letter.',
  '- `source`: `{type: file, path, format: jsonl|csv, follow?}`,',
  '  `{type: postgres, connection, table | query, key?, cursor?, capture?: replication|poll, slot?, publication?, heartbeat?}`',
  '  or `{type: jetstream, stream, subject, connection?}`. Configuration is trusted: endpoint source paths are not',
  '  confined to `files.roots`.',
  '  A file source without `follow` is read once: a file replaced or rewritten afterwards (`mv new.jsonl items.jsonl`)',
  '  is not read again by that run — the endpoint keeps serving what it read — until the next start of the app-server',
  '  (or a Rebuild), which cannot resume a file whose first bytes or last line read changed and builds a new',
  '  generation from the file now there, then switches to it; a file that only grew is resumed from its offset.',
  '  With `follow: true` appended lines are read as they come, and a file rotated, rewritten or truncated under it',
  '  is read again from its first line into a new generation. A source file or table that does not exist yet is',
  '  waited for (`phase: retrying`, docs/operations.md), not a failure.',
  '  A postgres **table** source without a `cursor` reads logical replication (`capture: replication`, the default',
  '  there): a publication and a replication slot (`slot`, `publication`; default `sluice_<node id>_<endpoint>`,',
  "  created if absent), a snapshot in the slot's exported snapshot, then every insert, update, delete and truncate.",
  '  A cache commit holds whole source transactions, never part of one: a transaction is committed as soon as the',
  '  stream has nothing more buffered, but the transactions that arrive while a commit is being written are committed',
  '  together (group commit). The change log — what a change feed sends — still shows each source transaction apart:',
  '  its changes in order, then a `commit` at its position.',
  "  A transaction of any size is staged with bounded JavaScript memory: past 10 000 staged changes (or one commit's",
  '  worth, `pipeline.commitEveryRecords` plus one batch, when that is more) the cache',
  "  writer moves them to a staging database in the generation's LMDB file (read by nobody else, not in the change",
  '  log), and the commit applies them in its one write transaction (a 1 000 000-row insert into an endpoint with',
  '  two indexes is mirrored by an app-server whose V8 heap is capped at 96 MB). What still grows with the',
  "  transaction is LMDB's own memory for that commit's dirty pages (the 1 000 000-row insert peaked at about",
  '  0.9 GB RSS, 2.3 GB before; 200 000 rows: about 120 → 384 MB, 116 → 529 before), and reading and committing it',
  "  still hold the app-server's main thread (about 4.6 s for 150 000 rows); split very large transactions. The",
  '  replication connection itself runs on a thread of its own, so it keeps answering',
  '  PostgreSQL (`wal_sender_timeout`) meanwhile. The database needs `wal_level = logical` and a role with `REPLICATION`;',
  '  the table needs a primary key (or a replica identity and `key`). Otherwise start-up stops with',
  '  `REPLICATION_NOT_ENABLED`, `REPLICATION_NOT_PERMITTED` or `REPLICA_IDENTITY_MISSING` (never a silent fallback).',
  "  The endpoint's `primaryKey` (its source columns) must be covered by the table's replica identity — all of them",
  '  primary-key columns, or columns of the `REPLICA IDENTITY USING INDEX` index, or `REPLICA IDENTITY FULL` —',
  '  since deletes and key-changing updates name a row only by its identity: else `REPLICA_IDENTITY_MISSING` says',
  '  which columns are outside it and what to do (`ALTER TABLE … REPLICA IDENTITY FULL`, or key the endpoint on the',
  "  identity's columns). This needs the database, so `--check` cannot tell. A generation follows the table itself",
  '  (its relation OID): a table dropped — and perhaps recreated under the same name — or taken out of the',
  '  publication stops the stream with `SOURCE_SCHEMA_CHANGED`, and the endpoint builds a new generation from the',
  '  table now there (at a restart the same check makes the decision a rebuild, never a resume).',
  '  `heartbeat: { table?, intervalMs }` (replication only) also writes one row per slot (`slot`, `at`) to `table`',
  '  (default `sluice_heartbeat`, created if absent and added to the publication; its rows never reach the endpoint)',
  '  every `intervalMs` while streaming, so the slot advances through transactions of its own even when the table is',
  "  idle. Keepalives already advance an idle slot past other tables' and databases' WAL (PostgreSQL 15 sends them as",
  '  soon as it has skipped WAL the client has not confirmed); the heartbeat is for setups where that is not enough,',
  '  e.g. a proxy between Sluice and PostgreSQL that drops idle replication connections. The role needs to be able to',
  '  create and write that table.',
  '  With `capture: poll` (the default for a source naming a `cursor`, and for `query` sources) it snapshots the table by key, then (with `cursor`, e.g. an `updated_at` or a sequence column)',
  '  polls every second for rows whose cursor grew, re-reading the last 10 s of cursor values so that a transaction',
  '  committing up to 10 s after it set its cursor value is still seen. It does not see deletes, nor a change from a',
  '  longer transaction; a rebuild (`POST /v1/endpoints/:name/rebuild`) catches both up. For a complete change feed,',
  '  publish changes to a JetStream stream and use a jetstream source.',
  '- `primaryKey`: one or more fields; `fields`: `{field: string|integer|number|boolean|timestamp|json}`; when',
  "  absent, a postgres source's fields take their columns' declared types (numeric, real, double precision →",
  '  number; int2, int4, int8 → integer; bool → boolean; timestamp(tz) → timestamp; json(b), arrays → json; text',
  '  types → string), others are inferred from a sample of the data; `indexes`: a list of field lists (with a',
  "  postgres source typing the fields, the indexes' and the primary key's fields are checked against the source's at",
  '  start: a field its records do not have fails the endpoint with `CONFIG_INVALID` naming `indexes[i][j]`); `filter`: a',
  "  query filter on the source's fields (it runs before `select`; against a PostgreSQL source it is checked at",
  "  start like a query's `$filter`, else the endpoint fails with `CONFIG_INVALID`; it is held to `query.maxIn` and",
  '  `query.maxDepth` as every query is); `select`: a list of fields to keep or a `{newName: sourceField}` map.',
  '  A `timestamp` field holds ISO 8601 text (a date, or a date and time with any offset and up to microseconds; no',
  "  offset means UTC, as for PostgreSQL's `timestamp without time zone`) or epoch milliseconds, in the years",
  '  0001–9999 (UTC); the cache stores, compares and serves it as UTC text with microseconds',
  '  (`"2026-12-05T23:33:49.737383Z"`), so filters, orders and indexes follow the instants — the endpoint\'s own',
  '  `filter` too (it runs before the cache, on values as the source spells them, and compares them as instants).',
  '  Values a JSON number cannot hold exactly — an `int8` beyond ±2^53, a `numeric` with more significant digits than',
  '  a double keeps, `NaN` and infinities — arrive as their text, which an `integer` or `number` field refuses: such a',
  "  row is a bad record (counted in the endpoint's `badRecords`, not served). Declaring the field `json` in `fields` keeps",
  '  every row (the others stay numbers; such a field cannot be part of a key) — packages/pipeline/README.md §',
  '  PostgreSQL values.',
  '',
  'Changing `fields`, `primaryKey` or `indexes` of an endpoint builds a new cache generation (blue/green).',
  '',
  '`switch: { mode: auto | manual, minRecordRatio?, maxBadRecords?, handoverWaitMs? }` (default `{mode: auto}`, no',
  'gates) decides when a rebuilt generation takes over. At `SnapshottingDone` a green generation with fewer records',
  'than `minRecordRatio` × the serving one (e.g. `0.9`), or more bad records than `maxBadRecords` (e.g. `0`), or any',
  'green in `manual` mode, is **held**: it keeps following its source, the alias does not move, the endpoint reports',
  "`phase: held` with the reason, until `POST /v1/endpoints/:name/promote`. An endpoint's first generation always",
  'switches (nothing serves yet).',
  "`handoverWaitMs` (100–300 000, default 10 000) bounds the hand-over of a logical-replication endpoint's switch",
  '(docs/generations.md § The switch hands over at a position): the alias moves only once the green has committed the',
  'position the serving generation last committed, the serving one paused at a commit for that last step. Past this',
  'wait the serving generation follows again and the switch is put off until the green caught up; a promote waits as',
  'long for the whole hand-over, then answers',
  '`504 ENDPOINT_TIMEOUT` and nothing moves (so a promote request may take up to this long).',
  '',
  '## Keys that moved',
  '',
  'The former `limits` section was split by concern into `transfers`, `http`, `query` and `retention`. A',
  '`sluice.yaml` written with the old keys keeps working: each old key is applied at its new place and logged once',
  'at start-up as a warning naming that place (`limits.leaseMs is deprecated: it is now transfers.leaseMs`). A key',
  'set at both places is refused (`CONFIG_INVALID`, "set twice"), and a bad value under an old key is reported at',
  'the old key as written.',
  '',
  '| old key | new key |',
  '|---|---|',
  ...Object.entries(MOVED_KEYS).map(([from, to]) => `| \`${from}\` | \`${to}\` |`),
  '',
  '## Rules across keys',
  '',
  'Checked at start (and by `--check`) by both apps, after each value is in range (`packages/core/src/config/rules.ts`):',
  '',
  "- an endpoint's `primaryKey` and `indexes` name fields of its `fields` (when given), and a list `select` keeps the",
  '  primary key; endpoint names are unique;',
  '- an endpoint source naming a `connection` names one defined in `connections`, of the right type (`postgres` for',
  '  a postgres source, `nats` for a jetstream source);',
  '- `backplane.strategy: nats` needs `nats`; `backplane.strategy: single` needs a `sqlite:` store;',
  '- `transfers.heartbeatMs` is less than `transfers.leaseMs`.',
  '',
  '## Environment overrides',
  '',
  '| variable | key |',
  '|---|---|',
  ...Object.entries(ENV_OVERRIDES).map(([env, path]) => `| \`${env}\` | \`${path}\` |`),
  '',
  '`SLUICE_FILE_ROOTS` is colon-separated.',
  '',
].join('\n');
const target = new URL('../../../docs/configuration.md', import.meta.url);
writeFileSync(target, out);
console.log(`wrote ${target.pathname} (${rows.length} keys)`);
