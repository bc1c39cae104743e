export { type CheckpointPortOptions, createCheckpointPort } from './checkpoint.js';
export { StoreDialect } from './dialect.js';
export { isUnavailableError, TransferFinalError, toStoreError } from './errors.js';
export { MIGRATION_TABLE, storeMigrations } from './migrations.js';
export { type OpenStoreOptions, openStore } from './open.js';
export type { NodeRow, StoreDatabase, TransferRow } from './schema.js';
export { SqlDataPlaneStore } from './store.js';
export { parseStoreUrl, redactUrl, type StoreLocation } from './url.js';
export { STORE_LIMITS } from './validate.js';
