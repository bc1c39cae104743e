import { type ChildProcess, spawn } from 'node:child_process';
import { sql } from './postgres.js';
import { waitFor } from './wait.js';

/** A `pg_recvlogical` streaming a logical replication slot, and the walsender that streams it for it. */
export interface TakenSlot {
  /** Kill it to give the slot back (SIGTERM; SIGKILL in a `finally`). */
  readonly child: ChildProcess;
  /** The PostgreSQL backend (walsender) streaming the slot to `pg_recvlogical`. */
  readonly walsender: number;
}

/** The walsender streaming `slot` to `pg_recvlogical`, or null. */
async function recvlogicalWalsender(url: string, slot: string): Promise<number | null> {
  const rows = await sql<{ pid: number }>(
    url,
    `SELECT s.active_pid AS pid FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
      WHERE s.slot_name = $1 AND r.application_name = 'pg_recvlogical'`,
    [slot],
  );
  return rows[0]?.pid ?? null;
}

/**
 * Takes logical replication `slot` from whatever streams it: its walsender is ended and a real `pg_recvlogical`
 * (pgoutput, `publication`) streams the slot instead — retried until it holds it, since the process it was taken
 * from may take it back in between. Another process streaming a slot is what a Sluice reader must wait out.
 *
 * @example
 * ```ts
 * const { child, walsender } = await takeReplicationSlot(url, 'sluice_h1_items_source');
 * try {
 *   // the endpoint cannot stream its slot now
 * } finally {
 *   child.kill('SIGKILL');
 * }
 * ```
 */
export async function takeReplicationSlot(url: string, slot: string, publication = slot): Promise<TakenSlot> {
  for (let tries = 0; ; tries++) {
    await sql(
      url,
      `SELECT pg_terminate_backend(active_pid, 10000) FROM pg_replication_slots
        WHERE slot_name = $1 AND active_pid IS NOT NULL`,
      [slot],
    );
    const child = spawn(
      'pg_recvlogical',
      ['-d', url, '-S', slot, '--start', '-f', '/dev/null', '-n', '-F', '0'].concat(
        ['proto_version=1', `publication_names=${publication}`].flatMap((o) => ['-o', o]),
      ),
      { stdio: 'ignore' },
    );
    const walsender = await waitFor(
      async () => (child.exitCode !== null ? -1 : await recvlogicalWalsender(url, slot)),
      { timeoutMs: 10_000, what: `pg_recvlogical to stream ${slot}` },
    ).catch(() => -1);
    if (walsender > 0) return { child, walsender };
    child.kill('SIGKILL');
    if (tries >= 20) throw new Error(`pg_recvlogical could not take slot ${slot}`);
  }
}
