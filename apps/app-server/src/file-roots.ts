import { resolve } from 'node:path';
import { ConfigError, fileInTheWay } from '@sluice/core';

/**
 * Refuses `files.roots` entries that can never be directories: a regular file, or a path below one. Requests'
 * file paths are confined to these roots, so such an entry silently made every transfer under it a 403 (or let a
 * request read exactly that one file) — a typo found only by the first user whose request was refused. A root
 * that does not exist yet is fine: a transfer writing into it creates it (the quick start's `out/`).
 *
 * Run by `--check` and at start (the app-server's own rule: the api-servers read no request files).
 *
 * @example
 * ```ts
 * checkFileRoots(config.files.roots, process.cwd());
 * // throws CONFIG_INVALID: files.roots[1]: /srv/afile cannot be a file root: /srv/afile is a file, not a directory; …
 * ```
 */
export function checkFileRoots(roots: readonly string[], cwd: string): void {
  roots.forEach((root, index) => {
    const path = resolve(cwd, root);
    const file = fileInTheWay(path);
    if (file === null) return;
    const key = `files.roots[${index}]`;
    const reason = `${path} cannot be a file root: ${file} is a file, not a directory`;
    throw new ConfigError(`${key}: ${reason}; point files.roots (SLUICE_FILE_ROOTS) at directories`, [
      { path: key, message: reason },
    ]);
  });
}
