import { METHODS } from 'node:http';
import type { FastifyInstance, HTTPMethods } from 'fastify';

/** True when every percent-encoding of `path` is well formed (the router refuses the others as bad URLs). */
function decodable(path: string): boolean {
  try {
    decodeURIComponent(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * The methods `app` has a route for at the path of `url` (its query string ignored), in alphabetical order — what
 * an `Allow` header lists, `HEAD` included wherever fastify added it beside a `GET`. Empty when no route has the
 * path, and when only `OPTIONS` matches it: a CORS plugin answers preflights on every path (`OPTIONS *`), which
 * makes no path known. Asked of the router itself (`findRoute` matches a concrete path as a request would), so it
 * cannot disagree with what a request with another method would reach.
 *
 * Called for requests no route took, never on a served request's path; each method without routes costs one
 * property read.
 *
 * @example
 * ```ts
 * allowedMethods(app, '/v1/endpoints/items/query?x=1'); // ['POST']
 * allowedMethods(app, '/nowhere'); // []
 * ```
 */
export function allowedMethods(app: FastifyInstance, url: string): string[] {
  const query = url.indexOf('?');
  // A malformed percent-encoding makes the router answer "bad URL" for any method that has routes: not a match.
  if (!decodable(query === -1 ? url : url.slice(0, query))) return [];
  const allow = METHODS.filter((method) => app.findRoute({ method: method as HTTPMethods, url }) !== null);
  return allow.some((method) => method !== 'OPTIONS') ? allow : [];
}
