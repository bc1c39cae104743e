/** The two internal routes every node serves for the direct-address strategy. */

/** `GET` → 200 OwnerReport | 404. */
export function ownerPath(transferId: string): string {
  return `/v1/internal/transfers/${encodeURIComponent(transferId)}/owner`;
}

/** `POST` → 200 `{ terminated: true, by }` once stopped | 404. */
export function terminatePath(transferId: string): string {
  return `/v1/internal/transfers/${encodeURIComponent(transferId)}/terminate`;
}

/** Joins an advertised base URL (maybe with a path prefix or trailing slash) and a route path. */
export function joinUrl(base: string, path: string): string {
  return `${base.replace(/\/+$/, '')}${path}`;
}

const ROUTE = /^\/v1\/internal\/transfers\/([^/]+)\/(owner|terminate)$/;

/** Parses a request path into the transfer id and action, or null when it is not one of the routes. */
export function matchInternalRoute(
  pathname: string,
): { transferId: string; action: 'owner' | 'terminate' } | null {
  const match = ROUTE.exec(pathname);
  if (!match) return null;
  let transferId: string;
  try {
    transferId = decodeURIComponent(match[1]!);
  } catch {
    return null;
  }
  return { transferId, action: match[2] as 'owner' | 'terminate' };
}
