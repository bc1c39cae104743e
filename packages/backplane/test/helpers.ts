import type { OwnerReport, TransferResponder } from '@sluice/core';

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
