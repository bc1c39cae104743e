import { isAbsolute, resolve } from 'node:path';
import { ConfigError } from '@sluice/core';

/** Where a store lives, parsed from its URL. */
export type StoreLocation =
  | { dialect: 'sqlite' /** Absolute file path, or `:memory:`. */; path: string }
  | { dialect: 'postgres'; connectionString: string };

const MAX_URL_LENGTH = 4096;

/**
 * Parses a store URL: `sqlite:<path>` (relative to the working directory), `sqlite::memory:`,
 * `sqlite:///abs/path`, or `postgres://…` / `postgresql://…`.
 *
 * @example
 * ```ts
 * parseStoreUrl('sqlite:./.sluice/store.db'); // { dialect: 'sqlite', path: '/cwd/.sluice/store.db' }
 * ```
 */
export function parseStoreUrl(url: string, cwd = process.cwd()): StoreLocation {
  if (typeof url !== 'string' || url.length === 0 || url.length > MAX_URL_LENGTH || url.includes('\0')) {
    throw invalid('must be a non-empty string of at most 4096 characters');
  }
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    try {
      new URL(url);
    } catch (err) {
      throw invalid('is not a valid postgres:// URL', err);
    }
    return { dialect: 'postgres', connectionString: url };
  }
  if (url.startsWith('sqlite:')) {
    let path = url.slice('sqlite:'.length);
    if (path.startsWith('//')) path = path.slice(2);
    if (path === '') throw invalid('names no SQLite file (use sqlite:<path> or sqlite::memory:)');
    if (path === ':memory:') return { dialect: 'sqlite', path };
    return { dialect: 'sqlite', path: isAbsolute(path) ? path : resolve(cwd, path) };
  }
  throw invalid('must be "sqlite:<path>", "sqlite::memory:" or a postgres:// URL');
}

function invalid(message: string, cause?: unknown): ConfigError {
  return new ConfigError(`Invalid store URL: ${message}`, [{ path: 'store', message }], { cause });
}

/** The URL with its secrets masked, safe for logs: core's `redactUrl` (one definition for every app and package). */
export { redactUrl } from '@sluice/core';
