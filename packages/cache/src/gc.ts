/**
 * Garbage collection of cache generations (the manager's `gc`): which retired or superseded generations may go,
 * and deleting them so that a crash mid-delete is finished by the next run. Moved out of manager.ts.
 */
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '@sluice/core';
import type { AliasTable } from './alias-table.js';
import { cachePath, openElsewhere } from './generation-files.js';
import { isEnvOpen } from './lmdb-env.js';

/** What a collection needs of its manager. */
export interface GcContext {
  readonly rootDir: string;
  readonly table: AliasTable;
  /** How long a retired (or superseded building) generation is kept before it may be deleted. */
  readonly gcGraceMs: number;
  readonly logger: Logger;
}

/**
 * Deletes retired generations whose grace period has passed (and abandoned `building` generations that a newer
 * generation of the same endpoint superseded), never an alias target, never a cache open in this process or
 * in another one. Deletion marks the cache first, so a crash mid-delete is finished by the next `gc`.
 * Returns the names deleted.
 */
export async function collectGarbage(ctx: GcContext, now: Date): Promise<string[]> {
  const { table } = ctx;
  const deleted: string[] = [];
  const metas = table.read((options) => table.cacheList(options));
  const targets = new Set(table.read((options) => table.aliasList(options)).map((a) => a.cache));
  const newest = new Map<string, string>();
  for (const meta of metas) {
    const seen = newest.get(meta.endpoint);
    if (seen === undefined || meta.name.slice(-26) > seen.slice(-26)) newest.set(meta.endpoint, meta.name);
  }
  for (const meta of metas) {
    if (meta.deleting) {
      removeFiles(ctx, meta.name);
      deleted.push(meta.name);
      continue;
    }
    if (targets.has(meta.name) || isEnvOpen(cachePath(ctx.rootDir, meta.name))) continue;
    const since =
      meta.state === 'retired'
        ? meta.retiredAt
        : meta.state === 'building' && newest.get(meta.endpoint) !== meta.name
          ? meta.createdAt
          : null;
    if (since === null || Date.parse(since) + ctx.gcGraceMs > now.getTime()) continue;
    if (await openElsewhere(cachePath(ctx.rootDir, meta.name))) {
      ctx.logger.info({ cache: meta.name }, 'cache gc: still open in another process, kept');
      continue;
    }
    const marked = table.write(() => {
      const current = table.cache(meta.name);
      if (!current || table.aliasList().some((a) => a.cache === meta.name)) return false;
      table.putCache({ ...current, deleting: true });
      return true;
    });
    if (!marked) continue;
    removeFiles(ctx, meta.name);
    deleted.push(meta.name);
    ctx.logger.info({ cache: meta.name }, 'cache gc: deleted');
  }
  removeOrphans(ctx);
  return deleted;
}

function removeFiles(ctx: GcContext, name: string): void {
  rmSync(cachePath(ctx.rootDir, name), { recursive: true, force: true });
  ctx.table.write(() => ctx.table.removeCache(name));
}

/** Removes cache directories that have no metadata (left by a crash mid-delete). */
function removeOrphans(ctx: GcContext): void {
  const dir = join(ctx.rootDir, 'caches');
  if (!existsSync(dir)) return;
  const known = new Set(ctx.table.read((options) => ctx.table.cacheList(options)).map((m) => m.name));
  for (const entry of readdirSync(dir)) {
    if (!known.has(entry) && !isEnvOpen(cachePath(ctx.rootDir, entry))) {
      rmSync(cachePath(ctx.rootDir, entry), { recursive: true, force: true });
      ctx.logger.info({ cache: entry }, 'cache gc: removed leftover directory');
    }
  }
}
