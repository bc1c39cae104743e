export type {
  EndpointPhase,
  EndpointStatus,
  EndpointStreamEvent,
  EndpointWatchView,
  GenerationsView,
  GenerationView,
  LagUnit,
  NodeView,
  RetryView,
  ServingFollowerPhase,
  ServingFollowerStatus,
  SlotWaitView,
  SwitchOutcome,
  SwitchView,
} from '@sluice/core';
export {
  type ClientOptions,
  createClient,
  type EndpointDescription,
  type EndpointTypes,
  type NoEndpointTypes,
  type SluiceClient,
} from './client.js';
export { ControlClient, STEERING_TIMEOUT_MS, type WatchOptions } from './control.js';
export {
  type ChangeEvent,
  type ChangesOptions,
  EndpointClient,
  keySegment,
  type Page,
  recordPath,
  type WireQuery,
} from './endpoint.js';
export { ClientErrorCode, type ProblemBody, SluiceClientError } from './errors.js';
export type { ConnectionLoss } from './event-stream.js';
export {
  DEFAULT_FRESHNESS_TIMEOUT_MS,
  type MinPosition,
  minPositionHeader,
  parsePositionHeader,
  type ReadOptions,
} from './freshness.js';
export type { TokenSource } from './http.js';
export { readEventStream, type SseMessage } from './sse.js';
export {
  type RetryOptions,
  type Submitted,
  TransfersClient,
  type TransferView,
  type Wire,
} from './transfers.js';
export { type DescribedEndpoint, endpointTypesSource } from './typegen.js';
