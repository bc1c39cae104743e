import { ConfigError } from '@sluice/core';

/**
 * Why the OS would not listen on a host, by errno code: the operator's next step, in words. A code not listed
 * still names the key, with the OS's own words.
 */
const HOST_REASONS: Readonly<Record<string, (host: string) => string>> = {
  EADDRNOTAVAIL: (host) =>
    `${host} is not an address of this machine (listen EADDRNOTAVAIL); use one of its addresses, or 0.0.0.0 for all of them`,
  EAFNOSUPPORT: (host) => `${host} is of an address family this machine does not run (listen EAFNOSUPPORT)`,
  ENOTFOUND: (host) => `${host} does not resolve to an address (getaddrinfo ENOTFOUND)`,
  EAI_AGAIN: (host) =>
    `${host} could not be resolved: the name service did not answer (getaddrinfo EAI_AGAIN)`,
};

/**
 * The error to throw for a failed `listen` on a configured host: a `CONFIG_INVALID` naming the key (`node.host`,
 * `api.host`, `--host`), the value and the OS's reason, when the host is what failed — a name that does not
 * resolve, an address that is not this machine's. The configuration check cannot tell those (only `listen`
 * can), and the OS error names no key: an operator got a stack trace. Any other error (the port in use, which
 * `formatCliError` explains with the port's key) is returned as it is.
 *
 * Only for errors of the `listen` call itself: a `getaddrinfo` failure elsewhere (a store's host) is not the
 * listen host's.
 *
 * @example
 * ```ts
 * await app.listen({ host, port }).catch((err: unknown) => {
 *   throw listenError(err, { key: 'api.host', host });
 * });
 * // CONFIG_INVALID: api.host: 10.255.255.1 is not an address of this machine (listen EADDRNOTAVAIL); …
 * ```
 */
export function listenError(err: unknown, at: { key: string; host: string }): unknown {
  const { code, syscall } = (err ?? {}) as NodeJS.ErrnoException;
  if (code === undefined) return err;
  const explain = HOST_REASONS[code];
  let reason: string;
  if (explain !== undefined) reason = explain(at.host);
  else if (syscall === 'getaddrinfo') reason = `${at.host} could not be resolved (getaddrinfo ${code})`;
  else if (syscall === 'listen' && code !== 'EADDRINUSE' && code !== 'EACCES')
    // EADDRINUSE and EACCES (a privileged port) are the port's, not the host's.
    reason = `cannot listen on ${at.host} (${(err as Error).message})`;
  else return err;
  return new ConfigError(`${at.key}: ${reason}`, [{ path: at.key, message: reason }], { cause: err });
}
