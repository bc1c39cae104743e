import { z } from 'zod';
import { isQueryableFieldName } from '../query.js';

/** A URL or server address in configuration (bounded: configuration is trusted, a runaway value is a mistake). */
export const UrlString = z.string().min(1).max(2048);

/** A DNS host name: dot-separated labels of letters, digits and inner hyphens (RFC 1123), no trailing dot. */
const HOST_NAME =
  /^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/** An IPv6 literal as `listen` takes it (no brackets), checked by the URL parser's own IPv6 grammar. */
function isIpv6(text: string): boolean {
  return text.includes(':') && !text.includes('[') && URL.canParse(`http://[${text}]/`);
}

/**
 * An address to listen on (`node.host`, `api.host`): an IP address or a host name; an IPv6 literal may be written
 * in brackets (`[::1]`), which are dropped (`listen` takes it bare). A URL (`http://0.0.0.0`) or a `host:port` is
 * refused here, at the key, instead of failing at start as a getaddrinfo error that names no key. (Whether a name
 * resolves, or an address is this host's, only `listen` can tell.)
 */
export const ListenHost = z
  .string()
  .min(1)
  .overwrite((host) => (host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host))
  .refine((host) => HOST_NAME.test(host) || isIpv6(host), {
    message:
      'must be an IP address or a host name, without a scheme or port (e.g. 0.0.0.0, ::, 10.0.0.5, localhost)',
  });

/** A port number; 0 lets the operating system choose one. */
export const PortSchema = z.number().int().min(0).max(65_535);

/** A record field named in configuration: never an operator (`$…`) nor a prototype key. */
export const FieldName = z.string().min(1).max(256).refine(isQueryableFieldName, {
  message:
    'not a valid field name: the query language cannot name it ("$…" reads as an operator; __proto__, constructor and prototype are reserved)',
});
