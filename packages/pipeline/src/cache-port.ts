/**
 * The part of `@sluice/cache` the pipeline uses, as structural types (the real `CacheManager`, `RwCache`
 * and `RoCache` satisfy them), so the pipeline depends on the cache contract, not its internals.
 */
import type { Filter, PipelineCheckpoint, Query, SwitchCause } from '@sluice/core';
import type { RecordSchema } from './ops.js';

export interface CacheCommitState {
  checkpoint: PipelineCheckpoint | null;
  committedAt: string | null;
  recordCount: number;
  snapshottingDone: string[];
}

export interface CacheInfoLike {
  name: string;
  endpoint: string;
  schemaHash: string;
  schema: RecordSchema;
  state: 'building' | 'serving' | 'retired';
  checkpoint: PipelineCheckpoint | null;
  recordCount: number;
  createdAt: string;
  retiredAt: string | null;
  switchedAt: string | null;
  notes: GenerationNotesLike;
}

/** What the pipeline notes about a generation in the alias table (`@sluice/cache`'s `GenerationNotes`). */
export interface GenerationNotesLike {
  snapshotDoneAt?: string | null;
  held?: { reason: string; at: string } | null;
  decision?: { decision: string; reason: string } | null;
  cause?: SwitchCause | null;
  badRecords?: number | null;
}

/** One recorded alias switch (`@sluice/cache`'s `AliasSwitch`). */
export interface AliasSwitchLike {
  alias: string;
  from: string | null;
  to: string;
  at: string;
  cause: SwitchCause;
  version: number;
}

export type CacheRecordOp =
  | { op: 'insert' | 'update' | 'upsert'; record: Record<string, unknown> }
  | { op: 'delete'; key: unknown[] };

export interface RoCacheLike {
  readonly name: string;
  readonly schema: RecordSchema;
  get(key: unknown[]): Record<string, unknown> | undefined;
  query(query: Query): { records: Record<string, unknown>[]; next: string | null };
  count(filter: Filter): number;
  commitState(): CacheCommitState;
  close(): Promise<void>;
}

export interface RwCacheLike extends RoCacheLike {
  apply(ops: CacheRecordOp[], options?: { onConflict?: 'fail' | 'skip' | 'overwrite' }): void;
  commit(
    checkpoint: PipelineCheckpoint | null,
    options?: { fence?: { writer: string; epoch: number }; keepCheckpoint?: boolean },
  ): Promise<void>;
  markSnapshottingDone(source: string): Promise<void>;
  clear(): Promise<void>;
}

export interface CacheManagerLike {
  create(input: { endpoint: string; schema: RecordSchema }): Promise<RwCacheLike>;
  openRw(name: string, expectedSchema?: RecordSchema): Promise<RwCacheLike>;
  openRo(nameOrAlias: string): Promise<RoCacheLike>;
  resolveAlias(alias: string): { cache: string; version: number } | null;
  redirect(
    alias: string,
    to: string,
    options?: { cause?: SwitchCause },
  ): Promise<{ from: string | null; version: number }>;
  list(): Promise<CacheInfoLike[]>;
  info(name: string): Promise<CacheInfoLike | null>;
  history(alias: string): AliasSwitchLike[];
  annotate(name: string, notes: GenerationNotesLike): Promise<void>;
  retire(name: string): Promise<void>;
}
