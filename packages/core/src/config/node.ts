import { z } from 'zod';
import { NameSchema } from '../addresses.js';
import { PortSchema, UrlString } from './primitives.js';

/** `node`: who this app-server is and where it listens (its control API and the backplane's internal routes). */
export const NodeConfigSchema = z
  .strictObject({
    id: NameSchema.default('local'),
    host: z.string().min(1).default('127.0.0.1'),
    port: PortSchema.default(7070),
    /** The URL peers reach this node at; derived from `host` and `port` when absent. */
    advertisedUrl: UrlString.optional(),
  })
  .prefault({});
export type NodeConfig = z.output<typeof NodeConfigSchema>;

/** `cluster`: the name every node of one cluster shares (NATS subjects and KV buckets are scoped by it). */
export const ClusterConfigSchema = z.strictObject({ name: NameSchema.default('sluice') }).prefault({});
export type ClusterConfig = z.output<typeof ClusterConfigSchema>;
