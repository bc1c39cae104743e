import { z } from 'zod';

/**
 * The query string of a control route that takes no parameters: any parameter is refused (400
 * `VALIDATION_FAILED` at `querystring.<name>`) rather than ignored — `GET /v1/transfers/x?state=FAILED` must not
 * answer as if it had filtered anything.
 *
 * @example
 * ```ts
 * api.get('/v1/nodes', { schema: { querystring: NoQuery } }, handler);
 * ```
 */
export const NoQuery = z.strictObject({});
