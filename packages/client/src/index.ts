export { type ClientOptions, createClient, type SluiceClient } from './client.js';
export {
  ControlClient,
  type EndpointStatus,
  type EndpointStreamEvent,
  type EndpointWatchView,
  type GenerationsView,
  type GenerationView,
  type NodeView,
  type SwitchOutcome,
  type SwitchView,
  type WatchOptions,
} from './control.js';
export {
  type ChangeEvent,
  type ChangesOptions,
  EndpointClient,
  keySegment,
  type Page,
  type WireQuery,
} from './endpoint.js';
export { ClientErrorCode, type ProblemBody, SluiceClientError } from './errors.js';
export { readEventStream, type SseMessage } from './sse.js';
export {
  type RetryOptions,
  type Submitted,
  TransfersClient,
  type TransferView,
  type Wire,
} from './transfers.js';
