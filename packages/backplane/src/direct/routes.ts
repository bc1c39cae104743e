/** The two internal routes every node serves for the direct-address strategy (the wire contract, once). */

/** `GET` → 200 OwnerReport | 404 problem (`NOT_FOUND`): not running on this node. */
export const OWNER_ROUTE = '/v1/internal/transfers/:id/owner';

/** `POST` → 200 `{ terminated: true, by }` once stopped | 404 problem (`NOT_FOUND`): not running on this node. */
export const TERMINATE_ROUTE = '/v1/internal/transfers/:id/terminate';

/** The owner route of one transfer. */
export function ownerPath(transferId: string): string {
  return OWNER_ROUTE.replace(':id', encodeURIComponent(transferId));
}

/** The terminate route of one transfer. */
export function terminatePath(transferId: string): string {
  return TERMINATE_ROUTE.replace(':id', encodeURIComponent(transferId));
}

/** Joins an advertised base URL (maybe with a path prefix or trailing slash) and a route path. */
export function joinUrl(base: string, path: string): string {
  return `${base.replace(/\/+$/, '')}${path}`;
}
