import { z } from 'zod';
import { UrlString } from './primitives.js';

const TlsSchema = z.strictObject({
  caFile: z.string().optional(),
  certFile: z.string().optional(),
  keyFile: z.string().optional(),
  rejectUnauthorized: z.boolean().default(true),
});

/**
 * A NATS server address: `nats://host:port`, `tls://host:port` or `host:port`. The client ignores any other scheme
 * (`htp://x` would dial the host `x`), so one is refused here, at the key, instead of failing later as a DNS error.
 */
const NatsUrl = UrlString.refine((s) => !s.includes('://') || /^(nats|tls):\/\//i.test(s), {
  message: 'must be a nats:// or tls:// URL (or host:port)',
});

/** NATS connection options (`nats`, and `connections.<name>.nats`): a URL, or servers plus credentials and TLS. */
export const NatsConfigSchema = z.union([
  NatsUrl,
  z
    .strictObject({
      servers: z.union([NatsUrl, z.array(NatsUrl).min(1)]),
      user: z.string().optional(),
      pass: z.string().optional(),
      token: z.string().optional(),
      /** An nkey seed (starts with `SU`). */
      nkeySeed: z.string().optional(),
      credsFile: z.string().optional(),
      tls: TlsSchema.optional(),
    })
    // A creds file holds a user JWT and that user's nkey seed: with a seed of its own as well, the client would
    // present one identity and silently ignore the other.
    .refine((nats) => nats.nkeySeed === undefined || nats.credsFile === undefined, {
      path: ['nkeySeed'],
      message: 'set credsFile or nkeySeed, not both: a creds file carries its own nkey seed',
    }),
]);
export type NatsConfig = z.output<typeof NatsConfigSchema>;
