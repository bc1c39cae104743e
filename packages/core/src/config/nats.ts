import { z } from 'zod';
import { UrlString } from './primitives.js';

const TlsSchema = z.strictObject({
  caFile: z.string().optional(),
  certFile: z.string().optional(),
  keyFile: z.string().optional(),
  rejectUnauthorized: z.boolean().default(true),
});

/** NATS connection options (`nats`, and `connections.<name>.nats`): a URL, or servers plus credentials and TLS. */
export const NatsConfigSchema = z.union([
  UrlString,
  z.strictObject({
    servers: z.union([UrlString, z.array(UrlString).min(1)]),
    user: z.string().optional(),
    pass: z.string().optional(),
    token: z.string().optional(),
    /** An nkey seed (starts with `SU`). */
    nkeySeed: z.string().optional(),
    credsFile: z.string().optional(),
    tls: TlsSchema.optional(),
  }),
]);
export type NatsConfig = z.output<typeof NatsConfigSchema>;
