/**
 * The `items (id, v, s)` table of the replication tests, as PostgreSQL holds it and as the api-server serves it with
 * read-your-writes — what those tests compare row for row.
 */
import { sql, waitFor } from '@sluice/testkit';
import { call } from './helpers.js';

/** One row of `items`. */
export interface ItemsRow {
  id: number;
  v: number;
  s: string | null;
}

/** Every row of `items` in the database at `url`, by id. */
export const tableRows = (url: string) => sql<ItemsRow>(url, 'SELECT id, v, s FROM items ORDER BY id');

/** The database's current WAL position (what a read-your-writes request asks the api-server to have committed). */
export const currentLsn = async (url: string) =>
  (await sql<{ lsn: string }>(url, 'SELECT pg_current_wal_lsn()::text AS lsn'))[0]!.lsn;

/**
 * Every record of `items` the api-server at `apiUrl` serves once it has committed `minPosition` (`sluice-min-position`
 * on each page), by id; asked again until it answers every page (up to `timeoutMs`).
 *
 * @example
 * ```ts
 * expect(await servedRows(api, await currentLsn(url))).toEqual(await tableRows(url));
 * ```
 */
export async function servedRows(
  apiUrl: string,
  minPosition: string,
  timeoutMs = 120_000,
): Promise<ItemsRow[]> {
  return waitFor(
    async () => {
      const rows: ItemsRow[] = [];
      let after: string | null = null;
      do {
        const reply = await call(`${apiUrl}/v1/endpoints/items/query`, {
          json: { $order_by: { id: 'asc' }, $limit: 1000, ...(after === null ? {} : { $after: after }) },
          headers: { 'sluice-min-position': minPosition },
        });
        if (reply.status !== 200) return null;
        rows.push(...(reply.body.records as ItemsRow[]));
        after = reply.body.next;
      } while (after !== null);
      return rows;
    },
    { timeoutMs, intervalMs: 300, what: `the api-server to serve position ${minPosition}` },
  );
}
