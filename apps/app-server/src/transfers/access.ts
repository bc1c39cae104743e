import { accessSync, constants } from 'node:fs';
import { dirname } from 'node:path';
import { PathNotAccessibleError, type TransferRequest } from '@sluice/core';

/**
 * What this process may do with a request's files, asked of the file system (EACCES / EPERM): at submit, so
 * that a path under the roots the app-server's user may not read or write is a `403 PATH_NOT_ACCESSIBLE` rather
 * than a transfer that fails later (or, for a directory it cannot search, a `500`); and at run time, so that a
 * denial only the run can meet (permissions changed since, a sticky directory refusing the publishing rename)
 * fails the transfer with the same code instead of a generic sink or source failure.
 */

/** The errnos of a permission refusal. */
export type Denied = 'EACCES' | 'EPERM';

/** True for the errno of a permission refusal. */
export function isDenied(code: string | undefined): code is Denied {
  return code === 'EACCES' || code === 'EPERM';
}

/** Where a confined path is, as far as the access check needs it (confinement.ts's walk). */
export interface AccessLocation {
  real: string;
  exists: boolean;
  directory: boolean;
  /** The deepest existing part of the path, resolved. */
  existing: string;
  /** Set when the walk met a directory it may not search. */
  denied: Denied | null;
}

/** Why a path cannot be used by this process, for the client; null when it can (as far as can be told now). */
export interface AccessProblem {
  reason: string;
  cause?: unknown;
}

function refused(path: string, mode: number): NodeJS.ErrnoException | null {
  try {
    accessSync(path, mode);
    return null;
  } catch (err) {
    return isDenied((err as NodeJS.ErrnoException).code) ? (err as NodeJS.ErrnoException) : null;
  }
}

/**
 * Checks a confined path: a source must be readable; a destination's directory (or, when it does not exist
 * yet, the deepest existing one, where the sink creates the rest) writable and searchable — the file sink
 * writes a temp file beside the destination and renames it into place. `access(2)` answers for this process's
 * real user, which is what it runs as. A missing source is left to the run (it may appear before that).
 */
export function accessProblem(
  location: AccessLocation,
  side: 'source' | 'destination',
): AccessProblem | null {
  if (location.denied !== null)
    return { reason: `a directory on the way cannot be searched by the server's user (${location.denied})` };
  if (side === 'source') {
    if (!location.exists || location.directory) return null;
    const err = refused(location.real, constants.R_OK);
    return err && { reason: `the server's user cannot read it (${err.code})`, cause: err };
  }
  const directory = location.exists ? dirname(location.real) : location.existing;
  const err = refused(directory, constants.W_OK | constants.X_OK);
  return err && { reason: `the server's user cannot write in ${directory} (${err.code})`, cause: err };
}

/** The first errno error with a system call in `err`'s cause chain (a file system failure), or null. */
function errnoIn(err: unknown): NodeJS.ErrnoException | null {
  let current: unknown = err;
  for (let depth = 0; depth < 8 && typeof current === 'object' && current !== null; depth++) {
    const candidate = current as NodeJS.ErrnoException;
    if (typeof candidate.code === 'string' && typeof candidate.syscall === 'string') return candidate;
    current = (current as { cause?: unknown }).cause;
  }
  return null;
}

/**
 * A run's failure as `PATH_NOT_ACCESSIBLE` when it is a permission refusal on one of the request's files (the
 * source, or the destination's directory, where its temp files live); null for anything else, which keeps its
 * own code (`SOURCE_FAILED`, `SINK_FAILED`, …).
 */
export function accessFailure(err: unknown, request: TransferRequest): PathNotAccessibleError | null {
  const errno = errnoIn(err);
  if (errno === null || !isDenied(errno.code)) return null;
  // A rename's error names both ends: `path` (the temp file) and `dest` (Node sets it; its type omits it).
  const { dest } = errno as { dest?: unknown };
  const paths = [errno.path, dest].filter((p): p is string => typeof p === 'string');
  const { source, destination } = request;
  let field: 'source.path' | 'destination.path' | null = null;
  let path = '';
  if (
    destination.type === 'file' &&
    paths.some((p) => p === destination.path || dirname(p) === dirname(destination.path))
  ) {
    field = 'destination.path';
    path = destination.path;
  } else if (source.type === 'file' && paths.includes(source.path)) {
    field = 'source.path';
    path = source.path;
  }
  if (field === null) return null;
  return new PathNotAccessibleError(path, field, `${errno.syscall} was refused (${errno.message})`, {
    cause: err,
  });
}
