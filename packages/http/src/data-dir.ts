import { accessSync, constants, mkdirSync } from 'node:fs';
import { ConfigError, fileInTheWay } from '@sluice/core';

/**
 * What a program does with its data directory: the app-server writes the caches (`read-write`), an api-server only
 * reads them (`read`), so a directory another user's app-server owns, readable to all, serves it.
 */
export const DataDirAccess = { READ: 'read', READ_WRITE: 'read-write' } as const;
export type DataDirAccess = (typeof DataDirAccess)[keyof typeof DataDirAccess];

const WHERE_TO = 'choose another dataDir (SLUICE_DATA_DIR)';

/** The OS's refusal in an operator's words, with its code (which is what a search finds). */
function refusal(err: unknown): string {
  const { code, message } = err as NodeJS.ErrnoException;
  switch (code) {
    case 'EACCES':
      return 'permission denied (EACCES)';
    case 'EPERM':
      return 'operation not permitted (EPERM)';
    case 'EROFS':
      return 'read-only file system (EROFS)';
    default:
      return message;
  }
}

function unusable(reason: string, cause: unknown): ConfigError {
  return new ConfigError(`dataDir: ${reason}`, [{ path: 'dataDir', message: reason }], { cause });
}

/**
 * Makes sure `dataDir` (an absolute path) is a directory this process may use as `access` says, creating it when it
 * is missing — before anything is opened there. The OS errors a program would otherwise meet deeper down (a
 * `mkdir` of the caches, the app-server's pid file) name neither the key nor what to change, and printed as a bare
 * stack; this throws `CONFIG_INVALID` at `dataDir` with the path, the OS's reason and the fix.
 *
 * @example
 * ```ts
 * prepareDataDir('/var/lib/sluice', 'read-write');
 * // throws CONFIG_INVALID: dataDir: /var/lib/sluice may not be read and written by this process:
 * //   permission denied (EACCES); Sluice keeps its caches there: give this process's user access to it, or …
 * ```
 */
export function prepareDataDir(dataDir: string, access: DataDirAccess): void {
  try {
    mkdirSync(dataDir, { recursive: true });
  } catch (err) {
    const file = fileInTheWay(dataDir);
    if (file !== null)
      throw unusable(
        `${dataDir} cannot be used as a directory: ${file} is a file; point dataDir (SLUICE_DATA_DIR) at a directory`,
        err,
      );
    throw unusable(
      `${dataDir} does not exist and cannot be created: ${refusal(err)}; create it for this process's user, or ${WHERE_TO}`,
      err,
    );
  }
  // mkdir succeeds on an existing directory only, so what is there now is one.
  const mode =
    access === DataDirAccess.READ
      ? constants.R_OK | constants.X_OK
      : constants.R_OK | constants.W_OK | constants.X_OK;
  try {
    accessSync(dataDir, mode);
  } catch (err) {
    const what = access === DataDirAccess.READ ? 'read' : 'read and written';
    throw unusable(
      `${dataDir} may not be ${what} by this process: ${refusal(err)}; Sluice keeps its caches there: give this process's user access to it, or ${WHERE_TO}`,
      err,
    );
  }
}
