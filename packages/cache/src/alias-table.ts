import type { AliasEntry, AliasSwitch, CacheInfo, GenerationNotes } from '@sluice/core';
import type { Database } from 'lmdb';
import type { SharedEnv } from './lmdb-env.js';

/**
 * What the alias environment records about each cache generation: the catalogue's facts about it that are not read
 * from the generation's own files (its size and last commit are), and what only the alias table tracks.
 */
export interface CacheMeta
  extends Pick<
    CacheInfo,
    'name' | 'endpoint' | 'createdAt' | 'schemaHash' | 'schema' | 'state' | 'retiredAt'
  > {
  /** Set before the files are removed; a cache marked deleting is finished off by the next `gc`. */
  deleting?: boolean;
  /** When the alias last moved to this generation. */
  switchedAt?: string | null;
  /** What the writer noted about the generation (snapshot done, hold, restart decision, why it was built). */
  notes?: GenerationNotes;
}

/** Most switches kept per alias (older ones are dropped as new ones are recorded). */
export const HISTORY_LIMIT = 200;

interface StoredAlias {
  cache: string;
  version: number;
  at: string;
  /**
   * Set when the alias was retired (its endpoint left the configuration): the entry stays as a tombstone so the
   * alias's version keeps counting up if the endpoint comes back — a reader holding an older event's version must
   * never take it for news — but readers see no alias.
   */
  retiredAt?: string;
}

/** The alias environment: alias → cache, cache metadata, and a table version bumped on every redirect. */
export class AliasTable {
  readonly env: SharedEnv;

  constructor(env: SharedEnv) {
    this.env = env;
    void this.aliases;
    void this.caches;
    void this.meta;
    void this.history;
  }

  private get aliases(): Database<StoredAlias, string> {
    return this.env.db<StoredAlias, string>('aliases');
  }

  private get caches(): Database<CacheMeta, string> {
    return this.env.db<CacheMeta, string>('caches');
  }

  /** Alias switch history: `[alias, version]` → the switch. */
  private get history(): Database<AliasSwitch, [string, number]> {
    return this.env.db<AliasSwitch, [string, number]>('history');
  }

  private get meta(): Database<number, string> {
    return this.env.db<number, string>('meta');
  }

  /** Reads in a snapshot taken now (sees other processes' latest commits). */
  read<T>(fn: (options: { transaction: import('lmdb').Transaction }) => T): T {
    this.env.root.resetReadTxn();
    const transaction = this.env.root.useReadTransaction();
    try {
      return fn({ transaction });
    } finally {
      transaction.done();
    }
  }

  /** Runs `fn` in one write transaction (across processes, LMDB serializes writers). */
  write<T>(fn: () => T): T {
    return this.env.root.transactionSync(fn);
  }

  version(options?: { transaction: import('lmdb').Transaction }): number {
    return this.meta.get('version', options) ?? 0;
  }

  bumpVersion(): number {
    const next = this.version() + 1;
    this.meta.putSync('version', next);
    return next;
  }

  /** The live alias `name` (a retired one is none). */
  alias(name: string, options?: { transaction: import('lmdb').Transaction }): AliasEntry | null {
    const stored = this.aliases.get(name, options);
    return stored && stored.retiredAt === undefined
      ? { alias: name, cache: stored.cache, version: stored.version }
      : null;
  }

  /** The last version `name` had, live or retired (0 if it never existed): a redirect counts on from it. */
  lastVersion(name: string): number {
    return this.aliases.get(name)?.version ?? 0;
  }

  /** Every live alias. */
  aliasList(options?: { transaction: import('lmdb').Transaction }): AliasEntry[] {
    const out: AliasEntry[] = [];
    for (const { key, value } of this.aliases.getRange(options))
      if (value.retiredAt === undefined) out.push({ alias: key, cache: value.cache, version: value.version });
    return out;
  }

  setAlias(name: string, cache: string, version: number): void {
    this.aliases.putSync(name, { cache, version, at: new Date().toISOString() });
  }

  /** Leaves a tombstone of `name` at `version` (it pointed at `cache`): readers see the alias gone. */
  retireAlias(name: string, cache: string, version: number): void {
    const at = new Date().toISOString();
    this.aliases.putSync(name, { cache, version, at, retiredAt: at });
  }

  /** Records one switch of `alias` (inside the redirect's write transaction) and trims the oldest beyond the limit. */
  addSwitch(entry: AliasSwitch): void {
    this.history.putSync([entry.alias, entry.version], entry);
    const keys: Array<[string, number]> = [];
    for (const key of this.history.getKeys({
      start: [entry.alias, 0],
      end: [entry.alias, Number.MAX_SAFE_INTEGER],
    }))
      keys.push(key as [string, number]);
    for (const key of keys.slice(0, Math.max(0, keys.length - HISTORY_LIMIT))) this.history.removeSync(key);
  }

  /** The switches of `alias`, newest first. */
  switches(alias: string, options?: { transaction: import('lmdb').Transaction }): AliasSwitch[] {
    const out: AliasSwitch[] = [];
    for (const { value } of this.history.getRange({
      start: [alias, Number.MAX_SAFE_INTEGER],
      end: [alias, 0],
      reverse: true,
      ...options,
    }))
      out.push(value);
    return out;
  }

  cache(name: string, options?: { transaction: import('lmdb').Transaction }): CacheMeta | null {
    return this.caches.get(name, options) ?? null;
  }

  cacheList(options?: { transaction: import('lmdb').Transaction }): CacheMeta[] {
    const out: CacheMeta[] = [];
    for (const { value } of this.caches.getRange(options)) out.push(value);
    return out;
  }

  putCache(meta: CacheMeta): void {
    this.caches.putSync(meta.name, meta);
  }

  removeCache(name: string): void {
    this.caches.removeSync(name);
  }
}
