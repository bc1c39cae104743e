import { z } from 'zod';
import { NameSchema } from '../addresses.js';
import { refuseProtoKey } from '../json.js';
import { NatsConfigSchema } from './nats.js';
import { UrlString } from './primitives.js';

/** A named connection a request may refer to (requests never carry URLs or credentials). */
export const ConnectionConfigSchema = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('postgres'),
    // pg would connect to PostgreSQL whatever the scheme says: a URL of another kind is a mistake to catch here.
    url: UrlString.refine((s) => /^postgres(ql)?:\/\//i.test(s), {
      message: 'must be a postgres:// or postgresql:// URL',
    }),
  }),
  z.strictObject({ type: z.literal('nats'), nats: NatsConfigSchema }),
]);
export type ConnectionConfig = z.output<typeof ConnectionConfigSchema>;

/** `connections`: name → connection; endpoint sources and transfer requests refer to them by name. */
export const ConnectionsConfigSchema = refuseProtoKey(z.record(NameSchema, ConnectionConfigSchema)).default(
  {},
);
