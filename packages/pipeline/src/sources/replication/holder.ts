/**
 * Who streams a replication slot. Every replication connection Sluice opens names its process in
 * `application_name` (`sluice <pid>@<host>`), so that a slot found busy can be told apart: the walsender of a
 * process that is gone (not yet reaped by PostgreSQL) may be terminated, the stream of another live app-server —
 * one configured with the same node id, so with the same slot names — must not be.
 */
import { hostname } from 'node:os';
import type pg from 'pg';

/** PostgreSQL keeps the first 63 bytes of an `application_name`. */
const NAME_BYTES = 63;

const nameOf = (pid: number, host: string) => `sluice ${pid}@${host}`.slice(0, NAME_BYTES);

/**
 * The `application_name` of this process's replication connections.
 *
 * @example
 * ```ts
 * new pg.Client({ connectionString: url, replication: 'database', application_name: replicationApplicationName() });
 * ```
 */
export function replicationApplicationName(): string {
  return nameOf(process.pid, hostname());
}

/** The Sluice process at the other end of a slot's walsender. */
export interface SlotHolder {
  pid: number;
  /** Its host name as the connection gave it (possibly cut short). */
  host: string;
  /** Whether it may still be streaming: alive on this host, or on another host (which cannot be checked here). */
  live: boolean;
}

/**
 * The Sluice process whose connection walsender `backendPid` serves, or null when that connection is no Sluice
 * replication connection (another tool's, or gone meanwhile).
 *
 * @example
 * ```ts
 * const holder = await slotHolder(client, state.activePid);
 * if (holder?.live) throw new SourceError(`slot ${slot} is streamed by process ${holder.pid} on ${holder.host}`);
 * ```
 */
export async function slotHolder(client: pg.Client, backendPid: number): Promise<SlotHolder | null> {
  const result = await client.query<{ name: string | null }>(
    'SELECT application_name AS name FROM pg_stat_activity WHERE pid = $1',
    [backendPid],
  );
  const name = result.rows[0]?.name ?? null;
  const match = name === null ? null : /^sluice (\d+)@(.*)$/s.exec(name);
  if (match === null) return null;
  const pid = Number(match[1]);
  const host = match[2]!;
  const here = nameOf(pid, hostname()) === name;
  return { pid, host, live: !here || (pid !== process.pid && processAlive(pid)) };
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, under another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
