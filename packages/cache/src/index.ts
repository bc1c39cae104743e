export {
  type ChangeEntry,
  type ChangeHead,
  ChangeLogReader,
  type ChangeRetention,
  DEFAULT_RETENTION,
  PinnedSnapshot,
} from './change-log.js';
export { RecordFormatError } from './errors.js';
export { CacheManager, openCacheManager } from './manager.js';
export { decodeRecord, RECORD_FORMAT, recordSerializer } from './record-json.js';
export { RoCache } from './ro-cache.js';
export { RwCache } from './rw-cache.js';
export { CacheSchemaSchema, parseCacheSchema, schemaHash } from './schema.js';
export {
  type AliasEntry,
  type AliasSwitch,
  type ApplyOptions,
  type CacheInfo,
  type CacheManagerOptions,
  type CacheSchema,
  CacheState,
  type CommitOptions,
  type CommitState,
  type ConflictPolicy,
  type GenerationNotes,
  type JsonPage,
  type QueryPlan,
  type QueryResult,
  type RecordOp,
  type SwitchCause,
} from './types.js';
