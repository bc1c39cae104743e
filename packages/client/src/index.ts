export { type ClientOptions, createClient, type SluiceClient } from './client.js';
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
