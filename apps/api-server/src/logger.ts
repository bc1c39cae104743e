import { type Logger as PinoLogger, pino } from 'pino';

/**
 * The api-server's structured logger: JSON lines on stdout (pino), one `service` field per line.
 *
 * @example
 * ```ts
 * const logger = createLogger('info');
 * logger.info({ port: 8080 }, 'api-server listening');
 * ```
 */
export function createLogger(level: string = 'info', destination?: NodeJS.WritableStream): PinoLogger {
  return pino(
    { level, base: { service: 'sluice-api-server', pid: process.pid } },
    destination ?? pino.destination({ dest: 1, sync: false }),
  );
}
