import { statSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * The nearest existing path at or above `path` when it is not a directory — the file that stops a `mkdir -p` of
 * `path` (which the OS reports as a bare EEXIST or ENOTDIR) — else `null`. The one definition: the apps' `dataDir`
 * check and the SQLite store's directory both name the file with it.
 *
 * @example
 * ```ts
 * fileInTheWay('/srv/afile/store'); // '/srv/afile' when /srv/afile is a regular file
 * ```
 */
export function fileInTheWay(path: string): string | null {
  for (let at = path; ; at = dirname(at)) {
    try {
      return statSync(at).isDirectory() ? null : at;
    } catch {
      if (dirname(at) === at) return null;
    }
  }
}
