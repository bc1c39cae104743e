import { createHash } from 'node:crypto';
import { ReplicationNotEnabledError, ReplicationNotPermittedError, SourceError } from '@sluice/core';
import pg from 'pg';
import { quoteIdent, quoteTableName } from '../../pg.js';
import { replicationApplicationName, slotHolder } from './holder.js';
import { keyCoveredByIdentity, relationOidOf, replicaIdentityOf } from './identity.js';
import { normalizeLsn } from './lsn.js';

/** One definition, in core: `--check` refuses two endpoints of a host that would read one slot. */
export { defaultReplicationName } from '@sluice/core';

/**
 * The default replication slot and publication name of a transfer's source (`handle` = `<transfer id>.source`):
 * `sluice_x_<handle>`, derived from the transfer alone — never from the node — so whichever node owns the transfer
 * (a takeover, a resume) streams the same slot. Transfer ids allow upper case, `.`, `:` and `-`, which the slot
 * alphabet does not: when lowering them loses anything (or the name is too long) a hash of the exact handle is
 * appended, so two transfer ids never share a slot.
 *
 * @example
 * ```ts
 * transferReplicationName('copy_orders.source'); // 'sluice_x_copy_orders_source_…' ('.' was replaced: hashed)
 * ```
 */
export function transferReplicationName(handle: string): string {
  const lowered = handle.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  const full = `sluice_x_${lowered}`;
  if (lowered === handle && full.length <= 63) return full;
  const hash = createHash('sha256').update(handle).digest('hex').slice(0, 10);
  return `${full.slice(0, 52)}_${hash}`;
}

/**
 * A table's columns as the source reads them: name, type OID and, where known, `attnum` (the column's identity in
 * the catalog) and `version` (the `xmin` of its `pg_attribute` row: the transaction that last altered it), in
 * attribute order. A column dropped and added again keeps its name and may keep its type, but is another column
 * (every row holds its new value, NULL or a default): only the `attnum` tells. A column retyped to its own type
 * `USING` an expression, or to another scale or precision (`numeric(10,2)` → `numeric(10,1)` rounds every value),
 * keeps name, type OID and `attnum`: only its row's `version`, with the table's rewrite ({@link CatalogColumns}
 * `storage`), tells. Positions written before these were recorded lack them, and a column is then compared by what
 * it has.
 */
export type ColumnList = Array<[name: string, typeOid: number, attnum?: number, version?: string]>;

/** What start-up learnt about the replicated table. */
export interface TableFacts {
  /** The key records are keyed by: the configured one, else the primary key; covered by the replica identity. */
  key: string[];
  columns: ColumnList;
  /** The table's relation OID: a generation follows this table, not whatever later bears its name. */
  relation: number;
}

const privilegeCodes = new Set(['42501']);

/**
 * Checks everything logical replication of `table` needs before anything is created, each with its own stable
 * error naming the setting to fix: `wal_level = logical` (`REPLICATION_NOT_ENABLED`), a role with `REPLICATION`
 * (`REPLICATION_NOT_PERMITTED`), a replica identity that covers the key (`REPLICA_IDENTITY_MISSING`, saying whether
 * the table has none, needs `key` configured, or is keyed outside its identity).
 */
export async function checkReplicationPrerequisites(
  client: pg.Client,
  table: string,
  configuredKey: string[] | null,
): Promise<TableFacts> {
  const wal = await client.query<{ wal_level: string }>('SHOW wal_level');
  const walLevel = wal.rows[0]?.wal_level ?? 'unknown';
  if (walLevel !== 'logical') throw new ReplicationNotEnabledError(walLevel);
  const role = await client.query<{ name: string; allowed: boolean }>(
    `SELECT rolname AS name, (rolreplication OR rolsuper) AS allowed FROM pg_roles WHERE rolname = current_user`,
  );
  const me = role.rows[0];
  if (!me?.allowed) throw new ReplicationNotPermittedError(me?.name ?? 'current_user');
  const identity = await replicaIdentityOf(client, table).catch((err: unknown) => {
    throw new SourceError(`Table ${table}: ${(err as Error).message}`, { cause: err });
  });
  // Updates and deletes name their row by the replica identity: the primary key (default), an index, or the
  // whole old row (full). The records' key must be among what it names, or deletes and key changes are lost.
  const key = keyCoveredByIdentity(table, identity, configuredKey);
  return { key, columns: await columnsOf(client, table), relation: await relationOidOf(client, table) };
}

/** The table's live columns (name, type OID, attnum) in attribute order. */
export async function columnsOf(client: pg.Client, table: string): Promise<ColumnList> {
  return (await catalogColumns(client, table)).columns;
}

/**
 * The table's live columns as the catalog has them now (name, type OID, attnum, version, in attribute order), the
 * names of those the rows already there read a value for without a change to stream: added with a default
 * (PostgreSQL keeps a constant one in the catalog, `atthasmissing`; a volatile one rewrites the table), or given
 * one since — and the table's `storage`: the `relfilenode`s of the table and of its partitions, which change when
 * the rows are rewritten (`ALTER COLUMN … TYPE`, also `VACUUM FULL`, `CLUSTER`, `TRUNCATE`).
 *
 * Stored generated columns are left out: `pgoutput` does not publish them (before PostgreSQL 18), so the stream could
 * never carry their values, and the snapshot leaves them out too (snapshot.ts) — records read either way agree.
 */
export interface CatalogColumns {
  columns: ColumnList;
  filled: ReadonlySet<string>;
  storage: string;
  labels: EnumLabels;
}

/**
 * The labels of the enums the table's columns hold — directly, as array elements or under a domain: label OID (its
 * identity in `pg_enum`), the enum type's name, the label. `ALTER TYPE … RENAME VALUE` keeps the OID and changes the
 * label every row holding it reads, without a change to stream; a value added (`ADD VALUE`) is a new OID and changes
 * no row.
 */
export type EnumLabels = Array<[labelOid: number, type: string, label: string]>;

/** {@link CatalogColumns} of `table` (two queries: the columns, the enum labels they hold). */
export async function catalogColumns(client: pg.Client, table: string): Promise<CatalogColumns> {
  const result = await client.query<{
    name: string;
    oid: number;
    attnum: number;
    version: string;
    filled: boolean;
    storage: string;
  }>(
    `SELECT attname AS name, atttypid::int AS oid, attnum::int AS attnum, xmin::text AS version,
            (atthasmissing OR atthasdef) AS filled,
            (SELECT string_agg(c.relfilenode::text, ',' ORDER BY c.oid) FROM pg_class c
              WHERE c.oid = $1::regclass OR c.oid IN (SELECT relid FROM pg_partition_tree($1::regclass))) AS storage
       FROM pg_attribute
      WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum`,
    [quoteTableName(table)],
  );
  // The columns' types, then their domains' base types and their arrays' element types, down to the enums.
  const labels = await client.query<{ oid: number; type: string; label: string }>(
    `WITH RECURSIVE types(oid) AS (
       SELECT atttypid FROM pg_attribute
        WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
       UNION
       SELECT CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.typelem END
         FROM pg_type t JOIN types ON t.oid = types.oid WHERE t.typtype = 'd' OR t.typelem <> 0)
     SELECT e.oid::int AS oid, format_type(e.enumtypid, NULL) AS type, e.enumlabel AS label
       FROM pg_enum e WHERE e.enumtypid IN (SELECT oid FROM types) ORDER BY e.oid`,
    [quoteTableName(table)],
  );
  return {
    columns: result.rows.map((r) => [r.name, r.oid, r.attnum, r.version]),
    filled: new Set(result.rows.filter((r) => r.filled).map((r) => r.name)),
    storage: result.rows[0]?.storage ?? '',
    labels: labels.rows.map((r) => [r.oid, r.type, r.label]),
  };
}

/**
 * Why the rows no longer read the enum labels the generation was filled with, or null: a label it knows (by OID) is
 * spelt otherwise now — `ALTER TYPE … RENAME VALUE` — so every row holding it reads the new one, and none of them
 * streams. Unknown (`known` undefined: a position written before labels were recorded) → learnt at the next relation
 * message.
 */
export function renamedLabels(known: EnumLabels | undefined, now: EnumLabels): string | null {
  if (known === undefined) return null;
  const current = new Map(now.map(([oid, , label]) => [oid, label]));
  const renamed = known
    .filter(([oid, , label]) => current.has(oid) && current.get(oid) !== label)
    .map(([oid, type, label]) => `value '${label}' of type ${type} was renamed to '${current.get(oid)}'`);
  if (renamed.length === 0) return null;
  return `enum ${renamed.join(', ')} (ALTER TYPE … RENAME VALUE): every row holding it reads the new label, and no change of theirs streams`;
}

/**
 * Why `next` cannot continue a cache filled with `previous`'s columns, or null: a column dropped, retyped, or
 * dropped and added again (another `attnum`, compared where both lists know it) changes what records mean (new
 * generation); an added column only adds a field (continue) — unless the rows already there read a value for it,
 * which {@link columnsProblem} tells as well.
 */
export function incompatibleColumns(previous: ColumnList, next: ColumnList): string | null {
  const now = new Map(next.map((column) => [column[0], column]));
  for (const [name, oid, attnum] of previous) {
    const column = now.get(name);
    if (column === undefined) return `column "${name}" was dropped`;
    const [, type, nowAttnum] = column;
    if (type !== oid) return `column "${name}" changed type (oid ${oid} → ${type})`;
    if (attnum !== undefined && nowAttnum !== undefined && attnum !== nowAttnum)
      return `column "${name}" was dropped and added again (attnum ${attnum} → ${nowAttnum}): every row holds the new column's value, and no change of theirs streams`;
  }
  return null;
}

/**
 * Why a generation filled with the `known` columns cannot go on with the table as its catalog says now, or null: a
 * column dropped, retyped or dropped and added again ({@link incompatibleColumns}), one altered while the table was
 * rewritten ({@link rewrittenColumns}; `storage` is the one the generation knows), or one added with a default —
 * that gives every row already there a value without a change to stream, so the generation would keep those rows
 * without it. Any default counts (one set after the column was added costs a rebuild that was not needed, never a
 * row).
 */
export function columnsProblem(
  known: ColumnList,
  catalog: CatalogColumns,
  storage: string | undefined,
  labels?: EnumLabels,
): string | null {
  const changed = incompatibleColumns(known, catalog.columns);
  if (changed !== null) return changed;
  const names = new Set(known.map(([name]) => name));
  const filled = catalog.columns
    .map(([name]) => name)
    .filter((name) => catalog.filled.has(name) && !names.has(name));
  // Named first: a volatile default rewrites the table, and the rewrite alters the catalog rows of columns whose
  // constant default it now stores in the rows (`atthasmissing` cleared), which is no news of its own.
  if (filled.length > 0)
    return `${filled.map((name) => `column "${name}"`).join(', ')} added with a default: the rows already there hold it, and no change of theirs streams`;
  return rewrittenColumns(known, catalog, storage) ?? renamedLabels(labels, catalog.labels);
}

/** {@link columnsProblem} of `table` as its catalog says now (one query). */
export async function columnsChange(
  client: pg.Client,
  table: string,
  known: ColumnList,
  storage: string | undefined,
  labels?: EnumLabels,
): Promise<string | null> {
  return columnsProblem(known, await catalogColumns(client, table), storage, labels);
}

/**
 * Why the `known` columns no longer say what the rows hold although names, types and attnums all match, or null: the
 * table was rewritten since (its `storage` changed) and a known column's catalog row was altered since (its
 * `version` changed) — `ALTER COLUMN … TYPE` to the same type `USING` an expression, or to another typmod that
 * changes values (a smaller `numeric` scale, a `timestamp(0)`), rewrites every row and streams nothing. A rewrite
 * alone (`VACUUM FULL`, `CLUSTER`) or an alteration alone (`SET NOT NULL`, a column grant) changes no value; both in
 * one generation's life without a retype cost a rebuild that was not needed, never a row. Unknown (a position
 * written before versions and storage were recorded) → compared at the next relation message, which records them.
 */
export function rewrittenColumns(
  known: ColumnList,
  catalog: CatalogColumns,
  storage: string | undefined,
): string | null {
  if (storage === undefined || storage === catalog.storage) return null;
  const now = new Map(catalog.columns.map(([name, , , version]) => [name, version]));
  const altered = known
    .filter(([name, , , version]) => version !== undefined && now.get(name) !== version)
    .map(([name]) => `column "${name}"`);
  if (altered.length === 0) return null;
  return `${altered.join(', ')} altered while the table was rewritten (ALTER COLUMN … TYPE … USING, or a new scale or precision): every row may hold a new value, and no change of theirs streams`;
}

/**
 * `announced` (a relation message's columns: names and types, no `attnum`) with each column's identity: the one the
 * generation already knows for a known name — so a column dropped and added again since stays noticeable — and
 * the catalog's for a column it did not know (one just added) or knew without one; and each column's `version` as
 * the catalog has it now. Only once {@link columnsProblem} found nothing against that catalog: an alteration it saw
 * changed no value, so the generation takes it as known (with the catalog's `storage`), and a later rewrite alone
 * (`VACUUM FULL`) does not count it again.
 */
export function withAttnums(announced: ColumnList, known: ColumnList, catalog: ColumnList): ColumnList {
  const knownAttnums = new Map(known.map(([name, , attnum]) => [name, attnum]));
  const inCatalog = new Map(catalog.map(([name, , attnum, version]) => [name, { attnum, version }]));
  return announced.map(([name, oid]) => {
    // A position written before attnums were recorded learns them here (as the catalog has them now).
    const attnum = knownAttnums.get(name) ?? inCatalog.get(name)?.attnum;
    if (attnum === undefined) return [name, oid];
    const version = inCatalog.get(name)?.version;
    return version === undefined ? [name, oid, attnum] : [name, oid, attnum, version];
  });
}

/** Creates the publication for `table` if absent, or adds the table to it. True when it created it. */
export async function ensurePublication(
  client: pg.Client,
  publication: string,
  table: string,
): Promise<boolean> {
  const exists = await client.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [publication]);
  if (exists.rowCount === 0) {
    try {
      await client.query(`CREATE PUBLICATION ${quoteIdent(publication)} FOR TABLE ${quoteTableName(table)}`);
      return true;
    } catch (err) {
      if ((err as { code?: string }).code !== '42710')
        throw asSetupError(err, `CREATE PUBLICATION ${publication}`);
    }
  }
  const includes = await client.query(
    `SELECT 1 FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
      WHERE p.pubname = $1 AND pr.prrelid = $2::regclass
     UNION ALL SELECT 1 FROM pg_publication WHERE pubname = $1 AND puballtables`,
    [publication, quoteTableName(table)],
  );
  if (includes.rowCount === 0) {
    try {
      await client.query(`ALTER PUBLICATION ${quoteIdent(publication)} ADD TABLE ${quoteTableName(table)}`);
    } catch (err) {
      if ((err as { code?: string }).code !== '42710')
        throw asSetupError(err, `ALTER PUBLICATION ${publication}`);
    }
  }
  return false;
}

function asSetupError(err: unknown, what: string): Error {
  const code = (err as { code?: string }).code;
  if (code !== undefined && privilegeCodes.has(code))
    return new SourceError(`${what}: ${(err as Error).message} (the source's role must own the table)`, {
      cause: err,
    });
  return new SourceError(`${what}: ${(err as Error).message}`, { cause: err });
}

/** A replication slot as `pg_replication_slots` reports it. */
export interface SlotState {
  name: string;
  plugin: string | null;
  database: string | null;
  confirmedFlush: string | null;
  /** `reserved`, `extended`, `unreserved` or `lost` (lost: the WAL it needs is gone). */
  walStatus: string | null;
  activePid: number | null;
}

/** The slot named `slot`, or null when there is none. */
export async function slotState(client: pg.Client, slot: string): Promise<SlotState | null> {
  const result = await client.query<{
    plugin: string | null;
    database: string | null;
    confirmed: string | null;
    wal_status: string | null;
    active_pid: number | null;
  }>(
    `SELECT plugin, database, confirmed_flush_lsn::text AS confirmed, wal_status, active_pid
       FROM pg_replication_slots WHERE slot_name = $1`,
    [slot],
  );
  const row = result.rows[0];
  if (!row) return null;
  return {
    name: slot,
    plugin: row.plugin,
    database: row.database,
    confirmedFlush: row.confirmed === null ? null : normalizeLsn(row.confirmed),
    walStatus: row.wal_status,
    activePid: row.active_pid,
  };
}

/** What {@link dropSlot} does with a slot still streamed once it has waited for it. */
export const BusySlot = {
  /** Terminates the walsender (a transfer fences a presumed-dead owner this way). */
  terminate: 'terminate',
  /**
   * Refuses (retryably) when another live Sluice process streams it — an app-server with the same node id, so the
   * same slot names — and terminates any other walsender (a process that is gone, not yet reaped).
   */
  refuseLiveSluice: 'refuse-live-sluice',
} as const;
export type BusySlot = (typeof BusySlot)[keyof typeof BusySlot];

/**
 * Drops `slot` if it exists. A slot still held by a walsender (a previous process that just died: PostgreSQL
 * notices the closed socket within moments) is waited for, up to `waitMs`, then its backend is terminated — or,
 * with {@link BusySlot.refuseLiveSluice}, left alone when it is another live Sluice process's stream.
 *
 * @example
 * ```ts
 * await dropSlot(client, 'sluice_h1_items_source', 15_000, BusySlot.refuseLiveSluice);
 * ```
 */
export async function dropSlot(
  client: pg.Client,
  slot: string,
  waitMs = 10_000,
  busy: BusySlot = BusySlot.terminate,
): Promise<boolean> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const state = await slotState(client, slot);
    if (state === null) return false;
    if (state.activePid === null) {
      try {
        await client.query('SELECT pg_drop_replication_slot($1)', [slot]);
        return true;
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code === '42704') return false; // dropped meanwhile
        if (code !== '55006')
          throw new SourceError(`Cannot drop slot ${slot}: ${(err as Error).message}`, { cause: err });
      }
    } else if (Date.now() > deadline) {
      if (busy === BusySlot.refuseLiveSluice) {
        const holder = await slotHolder(client, state.activePid);
        if (holder?.live)
          // Retryable: the other one may stop; until then its stream is left alone.
          throw new SourceError(
            `Replication slot ${slot} is streamed by another app-server (process ${holder.pid} on host ${holder.host}); two app-servers configured with one node.id share their slot names: give each its own node.id (SLUICE_NODE_ID)`,
            {
              details: {
                slot,
                activePid: state.activePid,
                holder: { pid: holder.pid, host: holder.host },
                retryable: true,
              },
            },
          );
      }
      await client.query('SELECT pg_terminate_backend($1)', [state.activePid]);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A freshly created slot: where its stream starts and the snapshot that matches it. */
export interface CreatedSlot {
  consistentPoint: string;
  snapshotName: string;
  /** The replication connection; the exported snapshot lives until it is closed or runs another command. */
  connection: pg.Client;
}

/**
 * Creates a `pgoutput` slot with an exported snapshot on a replication connection, kept open so another session
 * can import the snapshot (`SET TRANSACTION SNAPSHOT`); close it once imported.
 */
export async function createSlotWithSnapshot(url: string, slot: string): Promise<CreatedSlot> {
  const connection = new pg.Client({
    connectionString: url,
    replication: 'database',
    application_name: replicationApplicationName(),
  } as pg.ClientConfig);
  connection.on('error', () => {});
  try {
    await connection.connect();
    const result = await connection.query<{ consistent_point: string; snapshot_name: string }>(
      `CREATE_REPLICATION_SLOT ${quoteIdent(slot)} LOGICAL pgoutput EXPORT_SNAPSHOT`,
    );
    const row = result.rows[0]!;
    return {
      consistentPoint: normalizeLsn(row.consistent_point),
      snapshotName: row.snapshot_name,
      connection,
    };
  } catch (err) {
    await connection.end().catch(() => {});
    const code = (err as { code?: string }).code;
    if (code === '42501') throw new ReplicationNotPermittedError('current_user', { cause: err });
    throw new SourceError(`Cannot create replication slot ${slot}: ${(err as Error).message}`, {
      cause: err,
    });
  }
}
