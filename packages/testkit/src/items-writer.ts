import { type SourceWriter, startSourceWriter } from './source-writer.js';

/**
 * A writer committing to a table `items (id int PRIMARY KEY, v int, <a text column>)` whose rows are ids
 * 1…`initialRows`, until stopped: each transaction updates a few live rows' `v`, inserts one row (ids from 100 000
 * up, text `'new'`) and deletes one live row — a source that changes all the time, as under a blue/green switch.
 * The text column is filled by position, so its name is the caller's. Dispose (or `stop()`) ends it.
 *
 * @example
 * ```ts
 * await sql(url, 'CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, name text)');
 * await sql(url, "INSERT INTO items SELECT i, i, 'x' FROM generate_series(1, 1000) i");
 * await using writer = startItemsWriter(url, 1000);
 * await waitFor(() => writer.written >= 20);
 * ```
 */
export function startItemsWriter(url: string, initialRows: number): SourceWriter {
  return startSourceWriter(url, {
    initialRows,
    // Above any table the tests build, so an insert never meets a live id.
    firstNewId: 100_000,
    pauseMs: 2,
    transaction: ({ updates, added, removed }) => `DO $$ BEGIN
        UPDATE items SET v = v + 1 WHERE id IN (${updates.join(', ')});
        INSERT INTO items VALUES (${added}, 0, 'new');
        DELETE FROM items WHERE id = ${removed};
      END $$`,
  });
}
