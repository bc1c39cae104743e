export {
  createDirectBackplane,
  DirectBackplane,
  type DirectBackplaneOptions,
} from './direct/direct-backplane.js';
export { OWNER_ROUTE, ownerPath, TERMINATE_ROUTE, terminatePath } from './direct/routes.js';
// The fastify plugin serving the direct strategy's routes is `@sluice/backplane/fastify` (fastify is an optional peer).
export type { DirectRoutesTarget } from './direct/routes-target.js';
export type { NatsBackplaneOptions } from './nats/backplane-options.js';
export type { ReconnectPolicy } from './nats/connection-options.js';
export { createNatsBackplane, NatsBackplane, type OwnerQueryOptions } from './nats/nats-backplane.js';
export { defaultKvBucket, Subjects } from './nats/subjects.js';
export { kvKey, subjectToken } from './shared/encoding.js';
export { OwnerReportSchema } from './shared/wire.js';
export {
  createSingleNodeBackplane,
  SingleNodeBackplane,
  type SingleNodeBackplaneOptions,
} from './single-node.js';
