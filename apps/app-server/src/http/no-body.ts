import { z } from 'zod';

/**
 * The body of a control route that takes none: absent or `{}`, anything else refused (400 `VALIDATION_FAILED` at
 * the key's path) rather than ignored — `POST /v1/endpoints/items/promote` with `{"to": "<generation>"}` must not
 * promote whatever is held as if it had chosen. `nullish`: fastify validates an absent body as `null`, and a body
 * sent as `null` is refused before validation (the control API's `refuseNullBody` hook).
 *
 * @example
 * ```ts
 * api.post('/v1/endpoints/:name/promote', { schema: { body: NoBody } }, handler);
 * ```
 */
export const NoBody = z.strictObject({}).nullish();
