/**
 * The one place the store opens a better-sqlite3 database (the store file and its lock file): better-sqlite3 loads
 * its native addon at the first open, and an addon that is not there is an install to fix, not a store outage.
 */
import { ConfigError } from '@sluice/core';
import Database from 'better-sqlite3';

/** What `bindings` says when no built addon exists (better-sqlite3's build script never ran). */
const ADDON_NOT_FOUND = 'Could not locate the bindings file';

/**
 * The error a failed open means when better-sqlite3's native addon could not be loaded — not built (pnpm 10+ runs
 * no dependency's build script until the project approves it) or built for another Node.js (`ERR_DLOPEN_FAILED`)
 * — as `CONFIG_INVALID` naming the fix; null for any other failure (a file the process cannot open, …).
 *
 * @example
 * ```ts
 * try { new Database(path) } catch (err) { throw sqliteAddonError(err) ?? err }
 * ```
 */
export function sqliteAddonError(err: unknown): ConfigError | null {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as NodeJS.ErrnoException | null)?.code;
  if (!message.includes(ADDON_NOT_FOUND) && code !== 'ERR_DLOPEN_FAILED') return null;
  return new ConfigError(
    `The SQLite store needs better-sqlite3's native addon, which cannot be loaded: let its build script run and reinstall — \`pnpm approve-builds\` (or better-sqlite3 in onlyBuiltDependencies) then \`pnpm install\`, or \`npm rebuild better-sqlite3\` — or use a PostgreSQL store (store: postgres://…), which needs no native addon (${message})`,
    [
      {
        path: 'store',
        message: "sqlite: needs better-sqlite3's native addon, which is not built for this Node.js",
      },
    ],
    { cause: err },
  );
}

/**
 * `new Database(file, options)`, with a native addon that cannot be loaded thrown as {@link sqliteAddonError}'s
 * `CONFIG_INVALID`; any other failure is thrown as better-sqlite3 threw it.
 *
 * @example
 * ```ts
 * const db = openSqliteDatabase('/var/lib/sluice/store.db', { timeout: 5000 });
 * ```
 */
export function openSqliteDatabase(file: string, options: Database.Options): Database.Database {
  try {
    return new Database(file, options);
  } catch (err) {
    throw sqliteAddonError(err) ?? err;
  }
}
