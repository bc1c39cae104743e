import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { ConfigError, fileInTheWay } from '@sluice/core';

/**
 * Creates the directory of the SQLite store file `path` (an absolute path). A file where a directory of that path
 * must be is a mistake in `store`, not an outage: it throws `CONFIG_INVALID` at `store` naming the file, where
 * `mkdir` would only say EEXIST or ENOTDIR. Any other failure is rethrown as is.
 *
 * @example
 * ```ts
 * makeStoreDirectory('/var/lib/sluice/store.db'); // creates /var/lib/sluice when missing
 * ```
 */
export function makeStoreDirectory(path: string): void {
  const directory = dirname(path);
  try {
    mkdirSync(directory, { recursive: true });
  } catch (err) {
    const file = fileInTheWay(directory);
    if (file === null) throw err;
    const reason = `${path} cannot be used: ${file} is a file, in the way of the store's directory; point store (SLUICE_STORE_URL) at a path in a directory`;
    throw new ConfigError(`store: ${reason}`, [{ path: 'store', message: reason }], { cause: err });
  }
}
