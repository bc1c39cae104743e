import { z } from 'zod';
import { NameSchema } from '../addresses.js';
import { ListenHost, PortSchema, UrlString } from './primitives.js';

/** A URL peers can call: http(s), a host, nothing a path would be appended after (a query or a fragment). */
function isPeerUrl(text: string): boolean {
  if (!URL.canParse(text)) return false;
  const url = new URL(text);
  return (
    (url.protocol === 'http:' || url.protocol === 'https:') &&
    url.hostname !== '' &&
    url.search === '' &&
    url.hash === ''
  );
}

/** `node`: who this app-server is and where it listens (its control API and the backplane's internal routes). */
export const NodeConfigSchema = z
  .strictObject({
    id: NameSchema.default('local'),
    host: ListenHost.default('127.0.0.1'),
    port: PortSchema.default(7070),
    /** The URL peers reach this node at; derived from `host` and `port` when absent. */
    advertisedUrl: UrlString.refine(isPeerUrl, {
      message:
        'must be an http:// or https:// URL with a host and no query or fragment (peers call this node at it)',
    }).optional(),
  })
  .prefault({});
export type NodeConfig = z.output<typeof NodeConfigSchema>;

/** `cluster`: the name every node of one cluster shares (NATS subjects and KV buckets are scoped by it). */
export const ClusterConfigSchema = z.strictObject({ name: NameSchema.default('sluice') }).prefault({});
export type ClusterConfig = z.output<typeof ClusterConfigSchema>;
