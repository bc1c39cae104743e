import type { Logger, OwnerReport, TransferResponder } from '@sluice/core';

/** A logger that keeps what it is given, so tests can assert that something was logged. */
export interface CapturingLogger extends Logger {
  readonly entries: Array<{ level: string; obj: object | string; msg?: string }>;
  warnings(): Array<{ obj: object | string; msg?: string }>;
}

export function capturingLogger(): CapturingLogger {
  const entries: CapturingLogger['entries'] = [];
  const at =
    (level: string) =>
    (obj: object | string, msg?: string): void => {
      entries.push({ level, obj, ...(msg !== undefined ? { msg } : {}) });
    };
  return {
    entries,
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    warnings: () => entries.filter((e) => e.level === 'warn'),
  };
}

/** A responder that reports a fixed owner and counts terminate calls. */
export function countingResponder(
  report: OwnerReport,
  options: { stopMs?: number } = {},
): TransferResponder & { terminations: number } {
  const responder = {
    terminations: 0,
    report: () => report,
    async terminate() {
      responder.terminations += 1;
      if (options.stopMs) await new Promise((resolve) => setTimeout(resolve, options.stopMs));
    },
  };
  return responder;
}
