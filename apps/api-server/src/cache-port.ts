import type { ChangeEntry, ChangeHead } from '@sluice/cache';
import type { Filter, PipelineCheckpoint, Query } from '@sluice/core';

/**
 * The slice of `@sluice/cache` the api-server reads through. `CacheManager` (opened with `readOnly: true`)
 * and `RoCache` satisfy these structurally; keeping the registry on this narrow port documents exactly what
 * the serving path depends on.
 */
export interface ServedCacheSchema {
  fields: Record<string, string>;
  primaryKey: string[];
  indexes: string[][];
}

/** The commit state a response describes (read in the snapshot of its data). */
export interface ServedCommitState {
  checkpoint: PipelineCheckpoint | null;
  committedAt: string | null;
  recordCount: number;
}

/** What the api-server needs from one read-only cache generation. */
export interface ServedCache {
  readonly name: string;
  readonly endpoint: string;
  readonly schema: ServedCacheSchema;
  get(key: unknown[]): Record<string, unknown> | undefined;
  /** The record's stored JSON text, sent as it is. */
  getJson(key: unknown[]): Buffer | undefined;
  query(query: Query): { records: Record<string, unknown>[]; next: string | null; plan?: unknown };
  /** A page as the JSON array of its stored texts, and the commit state of the same snapshot (one per commit). */
  queryJson(query: Query): { json: Buffer; next: string | null; state: Readonly<ServedCommitState> };
  /**
   * The latest commit state, one object per commit; it starts a fresh read snapshot that the next `getJson`
   * in the same synchronous step reads too.
   */
  servingState(): Readonly<ServedCommitState>;
  count(filter: Filter): number;
  commitState(): ServedCommitState;
  /** The generation's change log (change feeds). */
  changeLog(): ServedChangeLog;
  close(): Promise<void>;
}

/** A generation's change log, as change feeds read it (`@sluice/cache`'s `ChangeLogReader`). */
export interface ServedChangeLog {
  head(): ChangeHead;
  read(after: number, limit: number): ChangeEntry[];
  pin(): PinnedGeneration;
}

/** One held read snapshot of a generation: its head, records (primary-key order) and log agree. */
export interface PinnedGeneration {
  readonly head: ChangeHead;
  read(after: number, limit: number): ChangeEntry[];
  records(afterKey?: Buffer): Iterable<{ dataKey: Buffer; record: Record<string, unknown> }>;
  close(): void;
}

/** What the api-server needs from the cache manager: aliases and read-only opens. */
export interface CacheDirectory {
  openRo(nameOrAlias: string): Promise<ServedCache>;
  resolveAlias(alias: string): { cache: string; version: number } | null;
  listAliases(): Array<{ alias: string; cache: string; version: number }>;
  aliasTableVersion(): number;
  close(): Promise<void>;
}
