import { lstatSync, readlinkSync, realpathSync } from 'node:fs';
import { basename, dirname, isAbsolute, resolve, sep } from 'node:path';
import {
  type ConnectionConfig,
  type DataAddress,
  PathNotAllowedError,
  type TransferRequest,
  UnknownConnectionError,
  UnknownEndpointError,
} from '@sluice/core';

/**
 * Resolves a path to its real location even when its tail does not exist yet (a destination file):
 * the longest existing ancestor is resolved through symlinks, the missing rest appended.
 */
function realLocation(path: string): string {
  const missing: string[] = [];
  let current = path;
  for (let hops = 0; ; ) {
    try {
      const real = realpathSync.native(current);
      return missing.length === 0 ? real : resolve(real, ...missing.reverse());
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw err;
      // A dangling symlink: follow it by hand, a write through it would land at its target.
      const link = lstatSync(current, { throwIfNoEntry: false });
      if (link?.isSymbolicLink()) {
        if (++hops > 40) throw err;
        current = resolve(dirname(current), readlinkSync(current));
        continue;
      }
      const parent = dirname(current);
      if (parent === current) return path;
      missing.push(basename(current));
      current = parent;
    }
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
    this.#roots = roots.map((root) => realLocation(resolve(options.cwd, root)));
    this.#connections = options.connections;
    this.#endpoints = new Set(options.endpoints);
  }

  /** The real paths of the allowed roots. */
  get roots(): readonly string[] {
    return this.#roots;
  }

  /** Returns the request with file paths replaced by their confined real paths; throws on a violation. */
  confine(request: TransferRequest): TransferRequest {
    return {
      ...request,
      source: this.#address(request.source) as TransferRequest['source'],
      destination: this.#address(request.destination) as TransferRequest['destination'],
    };
  }

  #address(address: DataAddress): DataAddress {
    switch (address.type) {
      case 'file':
        return { ...address, path: this.#confinePath(address.path) };
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

  #confinePath(path: string): string {
    const absolute = isAbsolute(path) ? path : resolve(this.#cwd, path);
    const real = realLocation(resolve(absolute));
    const inside = this.#roots.some(
      (root) => real === root || real.startsWith(root.endsWith(sep) ? root : root + sep),
    );
    if (!inside) throw new PathNotAllowedError(path.slice(0, 512));
    return real;
  }
}
