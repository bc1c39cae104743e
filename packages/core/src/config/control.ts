import { z } from 'zod';

/** Bearer credentials of the app-server's control API: static tokens and/or HS256 JWTs. */
export const ControlAuthSchema = z.strictObject({
  tokens: z.array(z.string().min(16, 'must be at least 16 characters')).optional(),
  jwtSecret: z.string().min(16, 'must be at least 16 characters').optional(),
});

/** `control`: the app-server's control API. */
export const ControlConfigSchema = z.strictObject({ auth: ControlAuthSchema.optional() }).prefault({});
export type ControlConfig = z.output<typeof ControlConfigSchema>;
