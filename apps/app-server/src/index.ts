export { backplaneKind, loadConfig, parseConfigText } from './config.js';
export { EndpointManager, type EndpointStatus } from './endpoints.js';
export { type AuthSettings, bearerCheck } from './http/auth.js';
export { buildServer, type ServerOptions } from './http/server.js';
export { createMetrics, type NodeMetrics, type PipelineSample } from './metrics.js';
export { type SluiceNode, type StartNodeOptions, startNode } from './node.js';
export { RequestPolicy } from './transfers/confinement.js';
export {
  type CoordinatorLimits,
  type CoordinatorOptions,
  type Submission,
  submissionReply,
  TransferCoordinator,
  type TransferExecutor,
} from './transfers/coordinator.js';
export { Scheduler, type Ticket } from './transfers/scheduler.js';
export { type OwnerView, type TransferView, transferView } from './transfers/view.js';
