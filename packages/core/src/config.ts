// The configuration of a Sluice host (`sluice.yaml`): one file per section under `config/`, the rules across
// sections in `config/rules.ts`, keys that moved in `config/moved-keys.ts`. This module is the public surface.
export { API_DEFAULTS, type ApiConfig, ApiConfigSchema } from './config/api.js';
export {
  type BackplaneConfig,
  BackplaneConfigSchema,
  type BackplaneKind,
  backplaneKind,
} from './config/backplane.js';
export { CACHE_DEFAULTS, type CacheConfig, CacheConfigSchema } from './config/cache.js';
export {
  type ConnectionConfig,
  ConnectionConfigSchema,
  ConnectionsConfigSchema,
} from './config/connections.js';
export { ControlAuthSchema, type ControlConfig, ControlConfigSchema } from './config/control.js';
export {
  type EndpointConfig,
  EndpointConfigSchema,
  EndpointsConfigSchema,
  FieldType,
  FieldTypeSchema,
  SWITCH_DEFAULTS,
  type SwitchConfig,
  SwitchConfigSchema,
  SwitchMode,
} from './config/endpoints.js';
export { DataDirConfigSchema, type FilesConfig, FilesConfigSchema } from './config/files.js';
export { type HttpConfig, HttpConfigSchema } from './config/http.js';
export { type ConfigWarning, MOVED_KEYS, moveOldKeys } from './config/moved-keys.js';
export { type NatsConfig, NatsConfigSchema } from './config/nats.js';
export { type ClusterConfig, ClusterConfigSchema, type NodeConfig, NodeConfigSchema } from './config/node.js';
export { PIPELINE_DEFAULTS, type PipelineConfig, PipelineConfigSchema } from './config/pipeline.js';
export { type QueryConfig, QueryConfigSchema, queryLimitsOf } from './config/query.js';
export { ENV_OVERRIDES, type ParsedConfig, parseConfig, resolveConfig } from './config/resolve.js';
export {
  type RetentionConfig,
  RetentionConfigSchema,
  transferRetentionMs,
} from './config/retention.js';
export { checkKeyAndIndexes } from './config/rules.js';
export { type SluiceConfig, type SluiceConfigInput, SluiceConfigSchema } from './config/schema.js';
export { isSqliteStore, StoreConfigSchema } from './config/store.js';
export { type TransfersConfig, TransfersConfigSchema } from './config/transfers.js';
