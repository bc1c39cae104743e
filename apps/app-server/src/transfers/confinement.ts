import { lstatSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, resolve, sep } from 'node:path';
import {
  type ConnectionConfig,
  type DataAddress,
  PathNotAccessibleError,
  PathNotAllowedError,
  type TransferRequest,
  UnknownConnectionError,
  UnknownEndpointError,
  ValidationError,
} from '@sluice/core';
import { accessProblem, type Denied, isDenied } from './access.js';

/** Why a path can never name a file: the errno the file system answers for it. */
type Impossible = 'ENOTDIR' | 'ENAMETOOLONG' | 'ELOOP';

/** Where a path really is, and whether the file system could ever hold a file there. */
interface Location {
  /** The real path: the longest existing ancestor resolved through symlinks, the missing rest appended. */
  real: string;
  /** Set when no file can exist at the path (a file as a parent, a name too long, a symlink loop). */
  impossible: Impossible | null;
  /** True when the path exists and is a directory. */
  directory: boolean;
  /** True when the path itself exists (`real` is then its resolved self, not an ancestor with a tail). */
  exists: boolean;
  /** The deepest part of the path that exists, resolved: the path itself, or the ancestor a missing tail hangs off. */
  existing: string;
  /** Set when this process may not look further along the path (a directory it cannot search). */
  denied: Denied | null;
}

/** Errnos of a path that cannot exist: the walk goes on from its parent, the path is refused once confined. */
const IMPOSSIBLE: ReadonlySet<string> = new Set<Impossible>(['ENOTDIR', 'ENAMETOOLONG', 'ELOOP']);

function errnoOf(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException).code;
}

/**
 * Resolves a path to its real location even when its tail does not exist yet (a destination file):
 * the longest existing ancestor is resolved through symlinks, the missing rest appended. A path that cannot
 * exist (`ENOTDIR`, `ENAMETOOLONG`, `ELOOP`) is resolved the same way, from its longest resolvable ancestor,
 * so that the caller can refuse it as outside the roots or as impossible — never by a raw errno.
 */
function realLocation(path: string): Location {
  const missing: string[] = [];
  let impossible: Impossible | null = null;
  let denied: Denied | null = null;
  let current = path;
  for (let hops = 0; ; ) {
    let code: string | undefined;
    try {
      const real = realpathSync.native(current);
      if (missing.length === 0) {
        const directory = statSync(real, { throwIfNoEntry: false })?.isDirectory() ?? false;
        return { real, impossible, directory, exists: true, existing: real, denied };
      }
      // Something is missing below `real`: it can only be created if `real` is a directory. (Below a directory
      // this process cannot search, "missing" only means unseen: `denied` says so.)
      if (impossible === null && denied === null && !statSync(real, { throwIfNoEntry: false })?.isDirectory())
        impossible = 'ENOTDIR';
      const tail = missing.reverse();
      return {
        real: resolve(real, ...tail),
        impossible,
        directory: false,
        exists: false,
        existing: real,
        denied,
      };
    } catch (err) {
      code = errnoOf(err);
      // EACCES / EPERM: a directory on the way cannot be searched. Nothing below it can be seen (nor read or
      // written by this process), so the walk goes on from the parent like for a missing name.
      if (isDenied(code)) denied ??= code;
      else if (code !== 'ENOENT' && !IMPOSSIBLE.has(code ?? '')) throw err;
    }
    if (code !== 'ENOENT' && !isDenied(code)) impossible ??= code as Impossible;
    let link: ReturnType<typeof lstatSync> | undefined;
    try {
      link = lstatSync(current, { throwIfNoEntry: false });
    } catch (err) {
      // ENOTDIR (a file among the parents) or ENAMETOOLONG: nothing is there; go on from the parent. EACCES:
      // the parent cannot be searched; go on from it.
      const lstatCode = errnoOf(err);
      if (isDenied(lstatCode)) denied ??= lstatCode;
      else if (!IMPOSSIBLE.has(lstatCode ?? '')) throw err;
      else impossible ??= lstatCode as Impossible;
    }
    // A dangling symlink: follow it by hand, a write through it would land at its target. A loop is not
    // followed (ELOOP): the link's own place is what gets confined.
    if (link?.isSymbolicLink() && (code === 'ENOENT' || code === 'ENOTDIR')) {
      if (++hops > 40) {
        impossible ??= 'ELOOP';
      } else {
        current = resolve(dirname(current), readlinkSync(current));
        continue;
      }
    }
    const parent = dirname(current);
    if (parent === current)
      return { real: path, impossible, directory: false, exists: false, existing: parent, denied };
    missing.push(basename(current));
    current = parent;
  }
}

/** What the client is told about a path that cannot name a file. */
function impossibleReason(reason: Impossible): string {
  switch (reason) {
    case 'ENOTDIR':
      return 'a parent of it is a file, not a directory';
    case 'ENAMETOOLONG':
      return 'a name in it is longer than the file system allows (255 bytes)';
    case 'ELOOP':
      return 'it goes through a symlink loop';
  }
}

/**
 * Confines request file paths to the configured roots (real paths, so `..` and symlinks cannot escape)
 * and checks that named connections and endpoints exist. Configuration is trusted; requests are not.
 *
 * @example
 * ```ts
 * const policy = new RequestPolicy({ roots: ['/data'], connections: {}, endpoints: ['items'], cwd: process.cwd() });
 * const runnable = policy.confine(request); // throws PathNotAllowedError for /etc/passwd
 * ```
 */
export class RequestPolicy {
  readonly #roots: string[];
  readonly #connections: Record<string, ConnectionConfig>;
  readonly #endpoints: ReadonlySet<string>;
  readonly #cwd: string;

  constructor(options: {
    roots: string[];
    connections: Record<string, ConnectionConfig>;
    endpoints: string[];
    cwd: string;
  }) {
    this.#cwd = options.cwd;
    const roots = options.roots.length > 0 ? options.roots : [options.cwd];
    this.#roots = roots.map((root) => realLocation(resolve(options.cwd, root)).real);
    this.#connections = options.connections;
    this.#endpoints = new Set(options.endpoints);
  }

  /** The real paths of the allowed roots. */
  get roots(): readonly string[] {
    return this.#roots;
  }

  /**
   * The request as a record keeps it: each relative file path made absolute against this node's working
   * directory (resolved as {@link confine} resolves it), every other field as it was. A relative path means a
   * file of the node that accepted the request; another node (a takeover, a sweeper, a terminate's clean-up)
   * has another working directory, and resolving the stored relative path there resumed and published the
   * transfer into another file (test/exactly-once-control.test.ts). Nothing is checked here: {@link confine}
   * refuses what is not allowed.
   *
   * @example
   * ```ts
   * policy.anchor({ ...request, destination: { type: 'file', path: 'out.jsonl', format: 'jsonl' } });
   * // → destination.path `${cwd}/out.jsonl`
   * ```
   */
  anchor(request: TransferRequest): TransferRequest {
    return {
      ...request,
      source: this.#anchored(request.source) as TransferRequest['source'],
      destination: this.#anchored(request.destination) as TransferRequest['destination'],
    };
  }

  #anchored(address: DataAddress): DataAddress {
    if (address.type !== 'file' || isAbsolute(address.path)) return address;
    return { ...address, path: resolve(this.#cwd, address.path) };
  }

  /**
   * Returns the request with file paths replaced by their confined real paths; throws on a violation. With
   * `access` (the default) a path this process may not read (source) or write (destination) is refused too
   * (`PATH_NOT_ACCESSIBLE`); cleaning up after a transfer passes `access: false`, since what it removes (the
   * destination's temps) must still be found when the source has become unreadable.
   */
  confine(request: TransferRequest, options: { access?: boolean } = {}): TransferRequest {
    const access = options.access ?? true;
    return {
      ...request,
      source: this.#address(request.source, 'source', access) as TransferRequest['source'],
      destination: this.#address(
        request.destination,
        'destination',
        access,
      ) as TransferRequest['destination'],
    };
  }

  #address(address: DataAddress, side: 'source' | 'destination', access: boolean): DataAddress {
    switch (address.type) {
      case 'file':
        return { ...address, path: this.#confinePath(address.path, side, access) };
      case 'postgres':
        this.#connection(address.connection, 'postgres');
        return address;
      case 'jetstream':
        if (address.connection !== undefined) this.#connection(address.connection, 'nats');
        return address;
      case 'endpoint':
        if (!this.#endpoints.has(address.endpoint)) throw new UnknownEndpointError(address.endpoint);
        return address;
    }
  }

  #connection(name: string, type: ConnectionConfig['type']): void {
    const connection = this.#connections[name];
    if (connection === undefined || connection.type !== type) throw new UnknownConnectionError(name);
  }

  /**
   * The real path of a request's file path: outside the roots is `PATH_NOT_ALLOWED` (403, checked first, so
   * nothing about the file system outside is revealed); inside, a path that cannot name a file — a file as a
   * parent, a name over 255 bytes, a symlink loop, or a destination that is a directory (a write-then-rename
   * sink would put its temp file beside it, outside the root when it is one) — is `VALIDATION_FAILED` (400);
   * one this process may not search, read (source) or write beside (destination) is `PATH_NOT_ACCESSIBLE` (403).
   */
  #confinePath(path: string, side: 'source' | 'destination', access: boolean): string {
    const absolute = isAbsolute(path) ? path : resolve(this.#cwd, path);
    const location = realLocation(resolve(absolute));
    const { real } = location;
    const inside = this.#roots.some(
      (root) => real === root || real.startsWith(root.endsWith(sep) ? root : root + sep),
    );
    if (!inside) throw new PathNotAllowedError(path.slice(0, 512));
    let reason: string | null = null;
    if (location.impossible !== null) reason = impossibleReason(location.impossible);
    else if (side === 'destination' && (location.directory || this.#roots.includes(real)))
      reason = 'it is a directory; name a file in it';
    if (reason === null) {
      // After the checks above: a path that cannot name a file is that (400), whatever its permissions.
      if (access) {
        const problem = accessProblem(location, side);
        if (problem !== null)
          throw new PathNotAccessibleError(path.slice(0, 512), `${side}.path`, problem.reason, {
            cause: problem.cause,
          });
      }
      return real;
    }
    const field = `${side}.path`;
    throw new ValidationError(`Invalid transfer request: ${field} ${q(path)} cannot be used: ${reason}`, [
      { path: field, message: `${reason.charAt(0).toUpperCase()}${reason.slice(1)}` },
    ]);
  }
}

/** A path quoted for a message, cut at 512 characters. */
function q(path: string): string {
  return JSON.stringify(path.length > 512 ? `${path.slice(0, 512)}…` : path);
}
