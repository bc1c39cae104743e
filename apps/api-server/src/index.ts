// The configuration and logger both apps share (documented in @sluice/http).
export { createLogger, type LoadConfigOptions, type LoadedConfig, loadConfig } from '@sluice/http';
export { type ApiApp, type BuildAppOptions, buildApp } from './app.js';
export {
  OPEN_SCOPE,
  TokenAuthenticator,
  type TokenClaims,
  TokenClaimsSchema,
  type TokenScope,
} from './auth.js';
export { FeedEvent, sseFrame } from './changes/frames.js';
export {
  type ChangeFeedPluginOptions,
  ChangesQuerySchema,
  changeFeedPlugin,
  type FeedGrant,
} from './changes/plugin.js';
export { decodeFeedToken, encodeFeedToken, type FeedPosition } from './changes/token.js';
export { CACHE_HEADER, CHECKPOINT_HEADER, formatCheckpointHeader } from './checkpoint-headers.js';
export { unwrapCursor, wrapCursor } from './cursor.js';
export {
  formatPositionHeader,
  MIN_POSITION_HEADER,
  type MinPosition,
  POSITION_HEADER,
  parseMinPosition,
  positionReached,
} from './freshness.js';
export {
  convertKeyComponent,
  formatKeySegment,
  MAX_KEY_SEGMENT,
  parseKeySegment,
  rawKeySegment,
} from './keys.js';
export { type ApiMetrics, createMetrics } from './metrics.js';
export {
  type AliasEventSource,
  EndpointRegistry,
  type RegistryOptions,
  type SwitchReason,
} from './registry.js';
export { type ApiServer, type StartApiServerOptions, startApiServer } from './server.js';
export type { Generation, Lease } from './serving-table.js';
