import type { Logger } from '@sluice/core';

/** The levels a pino logger has, lowest first. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** One recorded call: `logger.warn({ key }, 'moved')` is `{ level: 'warn', msg: 'moved', fields: { key } }`. */
export interface LogEntry {
  readonly level: LogLevel;
  /** The message: the string argument (the first, when the call passed no fields). */
  readonly msg: string | undefined;
  /** The object argument merged over the child bindings; `{}` when there were neither. */
  readonly fields: Record<string, unknown>;
}

/** A pino-compatible logger that records every call instead of writing it, so a test can assert on its logs. */
export interface CapturingLogger extends Logger {
  /** Every call so far, in order, shared with the loggers made by `child`. */
  readonly entries: LogEntry[];
  readonly level: string;
  trace(obj: object | string, msg?: string): void;
  fatal(obj: object | string, msg?: string): void;
  /** A logger whose entries carry `bindings` in their fields, recorded into the same `entries`. */
  child(bindings: Record<string, unknown>): CapturingLogger;
  /** The entries of one level. */
  at(level: LogLevel): LogEntry[];
  /** The entries of level `warn`. */
  warnings(): LogEntry[];
}

/**
 * A logger for tests: pass it where a `Logger` (or a pino logger's call surface) is wanted, then assert on
 * `entries`. Records every level; nothing is written anywhere.
 *
 * @example
 * ```ts
 * const logger = capturingLogger();
 * const backplane = new SingleNodeBackplane({ logger });
 * // ... make it fail to deliver ...
 * expect(logger.at('error').map((e) => e.msg)).toEqual(['event listener failed']);
 * ```
 */
export function capturingLogger(): CapturingLogger {
  return loggerInto([], {});
}

function loggerInto(entries: LogEntry[], bindings: Record<string, unknown>): CapturingLogger {
  const at =
    (level: LogLevel) =>
    (obj: object | string, msg?: string): void => {
      if (typeof obj === 'string') entries.push({ level, msg: obj, fields: { ...bindings } });
      else entries.push({ level, msg, fields: { ...bindings, ...obj } });
    };
  return {
    entries,
    level: 'trace',
    trace: at('trace'),
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    fatal: at('fatal'),
    child: (more) => loggerInto(entries, { ...bindings, ...more }),
    at: (level) => entries.filter((e) => e.level === level),
    warnings: () => entries.filter((e) => e.level === 'warn'),
  };
}
