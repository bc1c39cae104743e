export {
  ChangeLogReader,
  type ChangeRetention,
  DEFAULT_RETENTION,
  PinnedSnapshot,
} from './change-log.js';
export { DATA_DIR_HOST_FILE, readDataDirHost, writeDataDirHost } from './data-dir-host.js';
export { RecordFormatError } from './errors.js';
export { CacheManager, openCacheManager } from './manager.js';
export { isCacheNameOf } from './names.js';
export type { PatchUpsert } from './patch.js';
export { checkFilter, checkRowFilter } from './query-check.js';
export { decodeRecord, RECORD_FORMAT, recordSerializer } from './record-json.js';
export { type BufferJsonPage, RoCache } from './ro-cache.js';
export { RwCache } from './rw-cache.js';
export { CacheSchemaSchema, parseCacheSchema, schemaHash } from './schema.js';
export { type CacheManagerOptions, STAGED_IN_MEMORY } from './types.js';
