/** SQLSTATE / socket codes of a PostgreSQL connection that went away (server restart, terminated backend). */
const CONNECTION_LOSS_CODES: ReadonlySet<string> = new Set([
  '57P01',
  '57P02',
  '57P03',
  '08006',
  '08003',
  'ECONNRESET',
  'EPIPE',
]);

/**
 * True for an error that a dying PostgreSQL connection emitted with nobody listening (node-postgres emits
 * `error` on a checked-out client whose backend is terminated between queries). The pool replaces such a
 * connection and the next query on it fails with a typed `STORE_UNAVAILABLE`; it must not take the node down.
 *
 * @example
 * ```ts
 * process.on('uncaughtException', (err) => { if (!isDatabaseConnectionLoss(err)) process.exit(1); });
 * ```
 */
export function isDatabaseConnectionLoss(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const { code, stack, message } = err as { code?: unknown; stack?: unknown; message?: unknown };
  // Socket resets carry no library frames in their stack; every socket of this process that is not a
  // database connection (HTTP server, NATS, fetch) handles its own errors, so an unhandled reset is one.
  if (typeof code === 'string' && CONNECTION_LOSS_CODES.has(code)) return true;
  return (
    typeof stack === 'string' &&
    /node_modules[\\/](\.pnpm[\\/])?pg@|[\\/]pg[\\/]lib[\\/]/.test(stack) &&
    typeof message === 'string' &&
    /connection terminated|terminating connection|server closed the connection/i.test(message)
  );
}
