import { z } from 'zod';

/** Bearer credentials of the app-server's control API: static tokens and/or HS256 JWTs. */
export const ControlAuthSchema = z
  .strictObject({
    tokens: z.array(z.string().min(16, 'must be at least 16 characters')).optional(),
    jwtSecret: z.string().min(16, 'must be at least 16 characters').optional(),
  })
  // `auth` present asks for auth: with nothing to check tokens against it would leave every route open.
  .refine((auth) => (auth.tokens?.length ?? 0) > 0 || auth.jwtSecret !== undefined, {
    message: 'needs tokens or a jwtSecret (leave control.auth out to run the control API without auth)',
  });

/** `control`: the app-server's control API. */
export const ControlConfigSchema = z.strictObject({ auth: ControlAuthSchema.optional() }).prefault({});
export type ControlConfig = z.output<typeof ControlConfigSchema>;
