import { type DestinationStream, type Logger, pino } from 'pino';

/** Log levels the configuration (`logLevel`, `SLUICE_LOG_LEVEL`) accepts. */
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/** Options of {@link createLogger}. */
export interface CreateLoggerOptions {
  /** The program, on every line as `service` (e.g. `sluice-app-server`). */
  service: string;
  level: LogLevel;
  /** Further fields on every line, e.g. `{ node: 'h1' }`. */
  bindings?: Record<string, unknown>;
  /** Where lines go (default: stdout, written asynchronously and flushed when the process exits). */
  destination?: DestinationStream;
}

/**
 * The structured logger of a Sluice process: pino JSON lines with `service`, `pid` and the given bindings on
 * every line. No per-request lines are written by the apps (their rates and latencies are metrics), so an
 * asynchronous stdout costs a request nothing.
 *
 * @example
 * ```ts
 * const logger = createLogger({ service: 'sluice-app-server', level: 'info', bindings: { node: 'h1' } });
 * logger.info({ port: 7070 }, 'app-server ready');
 * ```
 */
export function createLogger(options: CreateLoggerOptions): Logger {
  return pino(
    { level: options.level, base: { service: options.service, pid: process.pid, ...options.bindings } },
    options.destination ?? pino.destination({ dest: 1, sync: false }),
  );
}
