import type { Logger } from '@sluice/core';
import pino from 'pino';

/** Log levels the configuration accepts. */
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/**
 * Creates the node's structured JSON logger (pino, to stdout), tagged with the node id.
 *
 * @example
 * ```ts
 * const logger = createLogger({ level: 'info', nodeId: 'h1' });
 * logger.info({ transferId: 'x' }, 'transfer started');
 * ```
 */
export function createLogger(options: { level: LogLevel; nodeId: string }): pino.Logger {
  return pino({ level: options.level, base: { node: options.nodeId } });
}

/** Narrows a pino logger to core's `Logger` port. */
export function asPortLogger(logger: pino.Logger): Logger {
  return logger as unknown as Logger;
}
