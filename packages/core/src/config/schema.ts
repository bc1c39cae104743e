import { z } from 'zod';
import { ApiConfigSchema } from './api.js';
import { BackplaneConfigSchema } from './backplane.js';
import { CacheConfigSchema } from './cache.js';
import { ConnectionsConfigSchema } from './connections.js';
import { ControlConfigSchema } from './control.js';
import { EndpointsConfigSchema } from './endpoints.js';
import { DataDirConfigSchema, FilesConfigSchema } from './files.js';
import { HttpConfigSchema } from './http.js';
import { NatsConfigSchema } from './nats.js';
import { ClusterConfigSchema, NodeConfigSchema } from './node.js';
import { PipelineConfigSchema } from './pipeline.js';
import { QueryConfigSchema } from './query.js';
import { RetentionConfigSchema } from './retention.js';
import { checkHost } from './rules.js';
import { StoreConfigSchema } from './store.js';
import { TransfersConfigSchema } from './transfers.js';

// One section per concern, each in its own file under `config/`.
const SectionsSchema = z.strictObject({
  node: NodeConfigSchema,
  cluster: ClusterConfigSchema,
  store: StoreConfigSchema,
  nats: NatsConfigSchema.optional(),
  backplane: BackplaneConfigSchema,
  dataDir: DataDirConfigSchema,
  files: FilesConfigSchema,
  connections: ConnectionsConfigSchema,
  api: ApiConfigSchema,
  control: ControlConfigSchema,
  transfers: TransfersConfigSchema,
  http: HttpConfigSchema,
  query: QueryConfigSchema,
  retention: RetentionConfigSchema,
  cache: CacheConfigSchema,
  pipeline: PipelineConfigSchema,
  endpoints: EndpointsConfigSchema,
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});
export type SluiceConfig = z.output<typeof SectionsSchema>;
export type SluiceConfigInput = z.input<typeof SectionsSchema>;

/**
 * The schema of `sluice.yaml`, shared by the app-server and the api-servers of a host: the sections, then the
 * cross-section rules of `rules.ts`. Every key has a default that runs embedded: SQLite and LMDB under
 * `./.sluice/`, no NATS. Keys of the former `limits` section are moved by `resolveConfig` before this runs.
 *
 * @example
 * ```ts
 * const json = z.toJSONSchema(SluiceConfigSchema, { io: 'input' });
 * ```
 */
export const SluiceConfigSchema = SectionsSchema.superRefine(checkHost, {
  // Rules relating sections judge valid values only: a lease of 10 ms is reported once, as out of range.
  when: (payload) => payload.issues.length === 0,
});
